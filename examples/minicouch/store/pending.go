package store

import (
	"context"
	"io"

	bolt "go.etcd.io/bbolt"
)

var errPending = &Error{501, "not_implemented", "store: not implemented yet"}

func (db *DB) bulkDocs(ctx context.Context, docs []*Doc, newEdits bool) ([]BulkResult, error) {
	return nil, errPending
}
func (db *DB) get(ctx context.Context, id string, opts GetOptions) (*DocRev, error) {
	return nil, errPending
}
func (db *DB) openRevs(ctx context.Context, id string, revs []string, opts GetOptions) ([]OpenRev, error) {
	return nil, errPending
}
func (db *DB) changes(ctx context.Context, opts ChangesOptions, fn func(Change) error) (ChangesResult, error) {
	return ChangesResult{}, errPending
}
func (db *DB) allDocs(ctx context.Context, bucket []byte, opts AllDocsOptions, fn func(AllDocsRow) error) (AllDocsResult, error) {
	return AllDocsResult{}, errPending
}
func (db *DB) revsDiff(ctx context.Context, req map[string][]string) (map[string]RevsDiff, error) {
	return nil, errPending
}
func (db *DB) openAttachment(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	return nil, 0, errPending
}
func (db *DB) getAttachment(ctx context.Context, id, rev, name string) (AttachmentInfo, error) {
	return AttachmentInfo{}, errPending
}
func (db *DB) putAttachment(ctx context.Context, id, rev, name, contentType string, r io.Reader, contentMD5 string) (string, error) {
	return "", errPending
}
func (db *DB) deleteAttachment(ctx context.Context, id, rev, name string) (string, error) {
	return "", errPending
}
func (db *DB) compact(ctx context.Context) error { return errPending }

var _ = bolt.Open
