package store

import "context"

// Put writes one document revision. With newEdits (CouchDB's default) doc.Rev
// must name a leaf of the document (or be "" for a new or deleted
// document), else ErrConflict; the new revision id is returned. With
// newEdits false the revision path in doc.Revisions (or doc.Rev) is merged
// into the tree as the replicator does; an already stored revision is left
// alone. Ids starting with "_local/" write _local documents (rev "0-N").
func (db *DB) Put(ctx context.Context, doc *Doc, newEdits bool) (string, error) {
	res, err := db.BulkDocs(ctx, []*Doc{doc}, newEdits)
	if err != nil {
		return "", err
	}
	if res[0].Err != nil {
		return "", res[0].Err
	}
	return res[0].Rev, nil
}

// Delete writes a deletion (tombstone) of leaf rev of document id and
// returns the tombstone's rev.
func (db *DB) Delete(ctx context.Context, id, rev string) (string, error) {
	return db.Put(ctx, &Doc{ID: id, Rev: rev, Deleted: true, Body: []byte("{}")}, true)
}

// BulkDocs writes docs in one commit (_bulk_docs) and returns one result per
// doc, in order. Per-document failures (conflict, missing_stub, bad
// attachment data) are in the results; the error is for failures of the
// whole request (database deleted, I/O).
func (db *DB) BulkDocs(ctx context.Context, docs []*Doc, newEdits bool) ([]BulkResult, error) {
	res, err := db.bulkDocs(ctx, docs, newEdits)
	if err == nil {
		db.s.counters.countWrites(res)
	}
	return res, err
}
