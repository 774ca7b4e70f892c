package replicate

import (
	"context"
	"errors"
	"sync/atomic"
)

// Totals are the process-wide sums of every run's counters since the
// plugin started: monotonic, so they can be exposed as Prometheus
// counters (a run's own Stats start from its checkpoint and die with it).
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

// totals holds the live process-wide sums.
var totals struct {
	docsRead, docsWritten, docWriteFailures, missingChecked, missingFound atomic.Int64
	changesRead, checkpointsSuccess, checkpointsFailure                   atomic.Int64
	changesReadFailures, workersStarted, sharedReads, sharedDocs          atomic.Int64
	resumes, stalls                                                       atomic.Int64
}

// ReadTotals returns the process-wide sums of all runs so far.
func ReadTotals() Totals {
	return Totals{
		DocsRead:            totals.docsRead.Load(),
		DocsWritten:         totals.docsWritten.Load(),
		DocWriteFailures:    totals.docWriteFailures.Load(),
		RevisionsChecked:    totals.missingChecked.Load(),
		MissingFound:        totals.missingFound.Load(),
		ChangesRead:         totals.changesRead.Load(),
		CheckpointsSuccess:  totals.checkpointsSuccess.Load(),
		CheckpointsFailure:  totals.checkpointsFailure.Load(),
		ChangesReadFailures: totals.changesReadFailures.Load(),
		WorkersStarted:      totals.workersStarted.Load(),
		SharedReads:         totals.sharedReads.Load(),
		SharedDocs:          totals.sharedDocs.Load(),
		Resumes:             totals.resumes.Load(),
		Stalls:              totals.stalls.Load(),

		DocWriteFailuresByReason: readFailureTotals(),
	}
}

func readFailureTotals() map[string]int64 {
	m := make(map[string]int64, len(failureTotals))
	for r, n := range failureTotals {
		m[r] = n.Load()
	}
	return m
}

// total names the process-wide sum a run counter also adds to.
type total interface{ sum() *atomic.Int64 }

type docsReadTotal struct{}
type docsWrittenTotal struct{}
type docWriteFailuresTotal struct{}
type missingCheckedTotal struct{}
type missingFoundTotal struct{}

func (docsReadTotal) sum() *atomic.Int64         { return &totals.docsRead }
func (docsWrittenTotal) sum() *atomic.Int64      { return &totals.docsWritten }
func (docWriteFailuresTotal) sum() *atomic.Int64 { return &totals.docWriteFailures }
func (missingCheckedTotal) sum() *atomic.Int64   { return &totals.missingChecked }
func (missingFoundTotal) sum() *atomic.Int64     { return &totals.missingFound }

// tallied is a run counter whose increments also go to the process-wide
// sum T. Store (seeding a run from its checkpoint) does not: those docs
// were counted by the run that did the work.
type tallied[T total] struct{ atomic.Int64 }

// Add adds n to the run's counter and to the process-wide sum.
func (c *tallied[T]) Add(n int64) int64 {
	var t T
	t.sum().Add(n)
	return c.Int64.Add(n)
}

// tallyCheckpoint counts one checkpoint attempt that had something to
// record; a run being stopped is not a failure.
func tallyCheckpoint(err error) {
	switch {
	case err == nil:
		totals.checkpointsSuccess.Add(1)
	case errors.Is(err, context.Canceled), errors.Is(err, ErrSkipCheckpoint):
	default:
		totals.checkpointsFailure.Add(1)
	}
}
