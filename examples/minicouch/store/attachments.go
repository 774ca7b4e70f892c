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

// StageAttachment reads a's data from r into the store now, ahead of the
// document's write: the parts of a multipart body come one after the
// other, and a large one is streamed into the store rather than held in
// memory or copied to a temporary file. It is stored as the write would
// store it (gzipped per the AttachmentPolicy, a.Digest checked, the size
// bound enforced, with those errors returned here), and the document's
// write (Put, BulkDocs) then takes it as the data of a. The caller must
// call ReleaseStaged(a) once the write is done or abandoned: until then
// compaction keeps the data, which no revision may reference yet.
func (db *DB) StageAttachment(ctx context.Context, a *Attachment, r io.Reader) error {
	db.s.attMu.RLock()
	defer db.s.attMu.RUnlock()
	level, max := db.s.attLimits(a.ContentType, a.Encoding != "" || a.AsStored)
	sb, err := db.stageStream(ctx, r, a.Digest, level, max, a.Name, declaredLen(a))
	if err != nil {
		return err
	}
	sb.held = true
	db.s.holdBlob(sb.ref.id, 1)
	a.staged = sb
	return nil
}

// ReleaseStaged ends what StageAttachment began: data of a that no
// write linked to a revision is dropped.
func (db *DB) ReleaseStaged(a *Attachment) {
	sb := a.staged
	if sb == nil {
		return
	}
	a.staged = nil
	db.s.attMu.RLock()
	defer db.s.attMu.RUnlock()
	if !sb.linked && sb.data == nil {
		db.dropChunks(sb.ref)
	}
	db.s.holdBlob(sb.ref.id, -1)
}
