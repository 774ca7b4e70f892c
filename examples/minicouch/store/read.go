package store

import "context"

// Get reads document id: its winning revision (ErrDeleted when that is a
// deletion), or opts.Rev (deleted revisions included; ErrNotFound when not
// stored). Ids starting with "_local/" read _local documents.
func (db *DB) Get(ctx context.Context, id string, opts GetOptions) (*DocRev, error) {
	db.s.counters.reads.Add(1)
	return db.get(ctx, id, opts)
}

// OpenRevs reads several revisions of document id (open_revs): revs nil
// means every leaf (ascending rev order, deleted ones included); otherwise
// each rev gives its revision (or, with opts.Latest, the leaves descending
// from it) or an OpenRev with Missing set. A document that does not exist
// gives ErrNotFound for revs nil and all-missing results otherwise.
func (db *DB) OpenRevs(ctx context.Context, id string, revs []string, opts GetOptions) ([]OpenRev, error) {
	db.s.counters.reads.Add(1)
	return db.openRevs(ctx, id, revs, opts)
}

// OpenRevsRequest is one document of DB.OpenRevsMany: OpenRevs's arguments.
type OpenRevsRequest struct {
	ID   string
	Revs []string
	Opts GetOptions
}

// OpenRevsResult is OpenRevs's answer for one OpenRevsRequest.
type OpenRevsResult struct {
	Revs []OpenRev
	Err  error
}

// OpenRevsMany is OpenRevs for many documents, read from one snapshot in
// one read transaction (_bulk_get) instead of a transaction per document.
// Results are in request order.
func (db *DB) OpenRevsMany(ctx context.Context, reqs []OpenRevsRequest) []OpenRevsResult {
	db.s.counters.reads.Add(uint64(len(reqs)))
	return db.openRevsMany(reqs)
}
