package store

import "context"

// Compact drops the bodies of non-leaf revisions (as CouchDB compaction
// does) and reclaims attachment blobs no stored revision references; then,
// in the background, compacts the store's file if its free pages pass the
// thresholds of Options.FileCompactMinFree and FileCompactMinFreeRatio.
func (db *DB) Compact(ctx context.Context) error {
	err := db.compact(ctx)
	if err == nil {
		db.s.scheduleFileCompaction()
	}
	return err
}
