package replicate

// Group is a set of replication runs, usually every run of a process,
// that share what they read of common sources (the recent changes of a
// source, the revisions fetched from it, its update_seq; see shared.go)
// and add up their counters (Stats). A job server gives one Group to all
// its runs, as it gives them one couchclient.Pool; a run given none is a
// group of its own. The zero value is an empty Group, ready to use; a
// Group must not be copied after first use.
type Group struct {
	changes changeWindows
	follow  followers
	revs    sharedRevs
	seqs    updateSeqs
	pending pendingProbes
	totals  totals
}

// Stats returns the sums of the counters of the group's runs so far:
// monotonic, so they can be exposed as Prometheus counters.
func (g *Group) Stats() Totals {
	t := &g.totals
	byReason := make(map[string]int64, len(writeFailureReasons))
	for i, r := range writeFailureReasons {
		byReason[r] = t.failures[i].Load()
	}
	return Totals{
		DocsRead:            t.docsRead.Load(),
		DocsWritten:         t.docsWritten.Load(),
		DocWriteFailures:    t.docWriteFailures.Load(),
		RevisionsChecked:    t.missingChecked.Load(),
		MissingFound:        t.missingFound.Load(),
		ChangesRead:         t.changesRead.Load(),
		CheckpointsSuccess:  t.checkpointsSuccess.Load(),
		CheckpointsFailure:  t.checkpointsFailure.Load(),
		ChangesReadFailures: t.changesReadFailures.Load(),
		WorkersStarted:      t.workersStarted.Load(),
		SharedReads:         t.sharedReads.Load(),
		SharedDocs:          t.sharedDocs.Load(),
		Resumes:             t.resumes.Load(),
		Stalls:              t.stalls.Load(),

		DocWriteFailuresByReason: byReason,
	}
}
