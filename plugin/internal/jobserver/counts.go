package jobserver

import "sync/atomic"

// Counts are the job server's event counts since the process started, for
// CouchDB's couch_replicator stats.
type Counts struct {
	Starts        uint64 // runs that began replicating (jobs.starts)
	Stops         uint64 // running jobs stopped: rotation, shutdown, id change (jobs.stops)
	Crashes       uint64 // runs that crashed and will be retried (jobs.crashes)
	DuplicateAdds uint64 // jobs whose replication id another job runs (jobs.duplicate_adds)
	FailedStarts  uint64 // runs that ended before replicating: bad doc, id failure, duplicate (failed_starts)
	Parks         uint64 // caught-up continuous jobs parked until their source changes (couchepi's)
	Handoffs      uint64 // slots handed on by caught-up jobs to jobs waiting for one (couchepi's)
	// CompletedStateUpdates and FailedStateUpdates count terminal states
	// written into _replicator docs (docs.completed_state_updates,
	// docs.failed_state_updates).
	CompletedStateUpdates, FailedStateUpdates uint64
}

// counts holds the live Counts.
var counts struct {
	starts, stops, crashes, duplicateAdds, failedStarts, parks atomic.Uint64
	handoffs                                                   atomic.Uint64
	completedStateUpdates, failedStateUpdates                  atomic.Uint64
}

// ReadCounts returns the counts so far.
func ReadCounts() Counts {
	return Counts{Starts: counts.starts.Load(), Stops: counts.stops.Load(), Crashes: counts.crashes.Load(),
		DuplicateAdds: counts.duplicateAdds.Load(), FailedStarts: counts.failedStarts.Load(), Parks: counts.parks.Load(), Handoffs: counts.handoffs.Load(),
		CompletedStateUpdates: counts.completedStateUpdates.Load(), FailedStateUpdates: counts.failedStateUpdates.Load()}
}
