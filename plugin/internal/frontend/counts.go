package frontend

import "sync/atomic"

// Counts are the frontend's event counts since the process started, for
// CouchDB's couch_replicator stats.
type Counts struct {
	JobsAdded   uint64 // jobs added or replaced for a doc or a _replicate body (jobs.adds)
	JobsRemoved uint64 // jobs removed for a deleted doc or db, or a cancel (jobs.removes)
	DBScans     uint64 // replicator dbs read from their start (db_scans)
}

// counts holds the live Counts.
var counts struct{ jobsAdded, jobsRemoved, dbScans atomic.Uint64 }

// ReadCounts returns the counts so far.
func ReadCounts() Counts {
	return Counts{JobsAdded: counts.jobsAdded.Load(), JobsRemoved: counts.jobsRemoved.Load(), DBScans: counts.dbScans.Load()}
}
