package frontend

import "sync/atomic"

// Stats are a frontend's event counts since New, for CouchDB's
// couch_replicator stats.
type Stats struct {
	JobsAdded   uint64 // jobs added or replaced for a doc or a _replicate body (jobs.adds)
	JobsRemoved uint64 // jobs removed for a deleted doc or db, or a cancel (jobs.removes)
	DBScans     uint64 // replicator dbs read from their start (db_scans)
	// RunsStoppedForEdit counts runs stopped before a doc write that
	// changes or deletes their replication (StopReplaced).
	RunsStoppedForEdit uint64
}

// counters are a Frontend's live Stats.
type counters struct {
	jobsAdded, jobsRemoved, dbScans, runsStoppedForEdit atomic.Uint64
}

// Stats returns the frontend's counts so far.
func (f *Frontend) Stats() Stats {
	c := &f.counts
	return Stats{JobsAdded: c.jobsAdded.Load(), JobsRemoved: c.jobsRemoved.Load(), DBScans: c.dbScans.Load(),
		RunsStoppedForEdit: c.runsStoppedForEdit.Load()}
}
