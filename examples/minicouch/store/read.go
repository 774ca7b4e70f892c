package store

import "context"

// Get reads document id: its winning revision (ErrDeleted when that is a
// deletion), or opts.Rev (deleted revisions included; ErrNotFound when not
// stored). Ids starting with "_local/" read _local documents.
func (db *DB) Get(ctx context.Context, id string, opts GetOptions) (*DocRev, error) {
	return db.get(ctx, id, opts)
}

// OpenRevs reads several revisions of document id (open_revs): revs nil
// means every leaf (ascending rev order, deleted ones included); otherwise
// each rev gives its revision (or, with opts.Latest, the leaves descending
// from it) or an OpenRev with Missing set. A document that does not exist
// gives ErrNotFound for revs nil and all-missing results otherwise.
func (db *DB) OpenRevs(ctx context.Context, id string, revs []string, opts GetOptions) ([]OpenRev, error) {
	return db.openRevs(ctx, id, revs, opts)
}
