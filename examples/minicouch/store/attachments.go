package store

import (
	"context"
	"io"

	"github.com/couchepi/couchepi/examples/minicouch/couchgzip"
)

// OpenAttachment streams the stored data of the attachment with digest
// ("md5-<base64>") and returns its length.
func (db *DB) OpenAttachment(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	return db.openAttachment(ctx, digest)
}

// OpenAttachmentDecoded streams attachment a's data decoded: inflated
// when it is stored gzipped, else as stored.
func (db *DB) OpenAttachmentDecoded(ctx context.Context, a AttachmentInfo) (io.ReadCloser, error) {
	rc, _, err := db.OpenAttachment(ctx, a.Digest)
	if err != nil || a.Encoding != "gzip" {
		return rc, err
	}
	zr, err := couchgzip.NewReader(rc)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &decodedReader{zr, rc}, nil
}

// decodedReader reads inflated data and closes the stored data's reader.
type decodedReader struct {
	io.ReadCloser
	stored io.Closer
}

func (r *decodedReader) Close() error {
	r.ReadCloser.Close()
	return r.stored.Close()
}

// GetAttachment returns the info of attachment name of document id at rev
// ("" = winning revision); read the data with OpenAttachment(info.Digest).
func (db *DB) GetAttachment(ctx context.Context, id, rev, name string) (AttachmentInfo, error) {
	return db.getAttachment(ctx, id, rev, name)
}

// PutAttachment adds or replaces attachment att.Name of document id (PUT
// /{db}/{id}/{name}): rev must be the current leaf ("" creates the
// document). The data, att.Reader (else att.Data), is streamed into the
// store, gzipped when the AttachmentPolicy says so and att.Encoding is
// "" (else stored as it comes, in that encoding); att.Digest
// ("md5-<base64>" or "", e.g. from Content-MD5) is verified against the
// data as it comes. Returns the new rev.
func (db *DB) PutAttachment(ctx context.Context, id, rev string, att Attachment) (string, error) {
	newRev, err := db.putAttachment(ctx, id, rev, att)
	if err == nil {
		db.s.counters.countWrites([]BulkResult{{ID: id, Rev: newRev}})
	}
	return newRev, err
}

// DeleteAttachment removes attachment name from leaf rev of document id
// and returns the new rev.
func (db *DB) DeleteAttachment(ctx context.Context, id, rev, name string) (string, error) {
	newRev, err := db.deleteAttachment(ctx, id, rev, name)
	if err == nil {
		db.s.counters.countWrites([]BulkResult{{ID: id, Rev: newRev}})
	}
	return newRev, err
}
