package store

import "context"

// Compact drops the bodies of non-leaf revisions (as CouchDB compaction
// does) and reclaims attachment blobs no stored revision references.
func (db *DB) Compact(ctx context.Context) error {
	return db.compact(ctx)
}
