package store

import (
	"context"
	"io"
)

// OpenAttachment streams the stored data of the attachment with digest
// ("md5-<base64>") and returns its length.
func (db *DB) OpenAttachment(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	return db.openAttachment(ctx, digest)
}

// GetAttachment returns the info of attachment name of document id at rev
// ("" = winning revision); read the data with OpenAttachment(info.Digest).
func (db *DB) GetAttachment(ctx context.Context, id, rev, name string) (AttachmentInfo, error) {
	return db.getAttachment(ctx, id, rev, name)
}

// PutAttachment adds or replaces attachment name of document id (PUT
// /{db}/{id}/{name}): rev must be the current leaf ("" creates the
// document). r is streamed into the store; contentMD5 ("md5-<base64>" or
// "") is verified. Returns the new rev.
func (db *DB) PutAttachment(ctx context.Context, id, rev, name, contentType string, r io.Reader, contentMD5 string) (string, error) {
	newRev, err := db.putAttachment(ctx, id, rev, name, contentType, r, contentMD5)
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
