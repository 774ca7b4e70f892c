package jobserver

import "sync/atomic"

// Stats are a job server's event counts since New, for CouchDB's
// couch_replicator stats.
type Stats struct {
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

// counters are a Server's live Stats.
type counters struct {
	starts, stops, crashes, duplicateAdds, failedStarts, parks atomic.Uint64
	handoffs                                                   atomic.Uint64
	completedStateUpdates, failedStateUpdates                  atomic.Uint64
}

// Stats returns the server's counts so far.
func (s *Server) Stats() Stats {
	c := &s.counts
	return Stats{Starts: c.starts.Load(), Stops: c.stops.Load(), Crashes: c.crashes.Load(),
		DuplicateAdds: c.duplicateAdds.Load(), FailedStarts: c.failedStarts.Load(), Parks: c.parks.Load(), Handoffs: c.handoffs.Load(),
		CompletedStateUpdates: c.completedStateUpdates.Load(), FailedStateUpdates: c.failedStateUpdates.Load()}
}
