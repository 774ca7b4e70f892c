package store

import "context"

// AllDocs calls fn for each non-deleted document in id order (raw byte
// order) within opts' range, or for each of opts.Keys. Design documents are
// included, _local documents are not. fn is called outside any storage
// transaction; returning ErrStop ends the iteration.
func (db *DB) AllDocs(ctx context.Context, opts AllDocsOptions, fn func(AllDocsRow) error) (AllDocsResult, error) {
	return db.allDocs(ctx, bucketDocs, opts, fn)
}

// LocalDocs is AllDocs over the _local documents (_local_docs).
func (db *DB) LocalDocs(ctx context.Context, opts AllDocsOptions, fn func(AllDocsRow) error) (AllDocsResult, error) {
	return db.allDocs(ctx, bucketLocal, opts, fn)
}
