package replicate

import "sync/atomic"

// Totals are the sums of the counters of a Group's runs (Group.Stats):
// monotonic, so they can be exposed as Prometheus counters (a run's own
// Stats start from its checkpoint and die with it).
type Totals struct {
	DocsRead           int64
	DocsWritten        int64
	DocWriteFailures   int64
	RevisionsChecked   int64
	MissingFound       int64
	ChangesRead        int64
	CheckpointsSuccess int64
	CheckpointsFailure int64
	// ChangesReadFailures counts changes feeds that ended in an error
	// (couch_replicator.changes_read_failures).
	ChangesReadFailures int64
	// WorkersStarted counts the document workers runs started
	// (couch_replicator.workers_started).
	WorkersStarted int64
	// SharedReads counts rounds served by another run's read of the
	// same source; SharedDocs, revisions another run had fetched
	// (couchepi's).
	SharedReads, SharedDocs int64
	// Resumes counts runs started from Options.Resume (couchepi's).
	Resumes int64
	// Stalls counts runs ended because they stopped making progress
	// (Options.StallTimeout; couchepi's).
	Stalls int64
	// DocWriteFailuresByReason counts DocWriteFailures by kind of refusal,
	// every kind of WriteFailureReasons present (couchepi's).
	DocWriteFailuresByReason map[string]int64
}

// totals are the live sums of a Group.
type totals struct {
	docsRead, docsWritten, docWriteFailures, missingChecked, missingFound atomic.Int64
	changesRead, checkpointsSuccess, checkpointsFailure                   atomic.Int64
	changesReadFailures, workersStarted, sharedReads, sharedDocs          atomic.Int64
	resumes, stalls                                                       atomic.Int64
	// failures counts DocWriteFailures by kind, in writeFailureReasons' order.
	failures [len(writeFailureReasons)]atomic.Int64
}

// addFailure counts one refusal of the given kind (writeFailureReason).
func (t *totals) addFailure(reason string) {
	for i, r := range writeFailureReasons {
		if r == reason {
			t.failures[i].Add(1)
			return
		}
	}
}

// tallied is a run counter whose increments also go to its group's sum
// (counters.bind). Store (seeding a run from its checkpoint) does not:
// those docs were counted by the run that did the work.
type tallied struct {
	atomic.Int64
	sum *atomic.Int64
}

// Add adds n to the run's counter and to its group's sum.
func (c *tallied) Add(n int64) int64 {
	c.sum.Add(n)
	return c.Int64.Add(n)
}

// tallyCheckpoint counts one checkpoint attempt that had something to
// record: a success, or a failure when failed (see run.checkpointFailed).
func (t *totals) tallyCheckpoint(err error, failed bool) {
	switch {
	case err == nil:
		t.checkpointsSuccess.Add(1)
	case failed:
		t.checkpointsFailure.Add(1)
	}
}
