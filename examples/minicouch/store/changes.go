package store

import "context"

// Changes calls fn for each document changed after opts.Since, in sequence
// order (each document once, at its latest sequence). fn is called outside
// any storage transaction, so it may block; returning ErrStop ends the
// iteration without error.
func (db *DB) Changes(ctx context.Context, opts ChangesOptions, fn func(Change) error) (ChangesResult, error) {
	return db.changes(ctx, opts, fn)
}
