package replicate

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// counters are the live stats of a run, updated by workers without locks.
type counters struct {
	missingChecked   tallied // also summed in the run's Group
	missingFound     tallied
	docsRead         tallied
	docsWritten      tallied
	docWriteFailures tallied
	bulkGetDocs      atomic.Int64
	bulkGetAttempts  atomic.Int64
	failures         failureLog

	mu           sync.Mutex
	pending      *int64
	checkpointed json.RawMessage
}

// bind makes the tallied counters add to t's sums too.
func (c *counters) bind(t *totals) {
	c.missingChecked.sum, c.missingFound.sum = &t.missingChecked, &t.missingFound
	c.docsRead.sum, c.docsWritten.sum, c.docWriteFailures.sum = &t.docsRead, &t.docsWritten, &t.docWriteFailures
}

// seed starts the counters at the per-field max of carried-over stats and the checkpoint's newest entry.
func (c *counters) seed(s Stats, h *HistoryEntry) {
	if h != nil {
		s.RevisionsChecked = max(s.RevisionsChecked, h.MissingChecked)
		s.MissingRevisionsFound = max(s.MissingRevisionsFound, h.MissingFound)
		s.DocsRead = max(s.DocsRead, h.DocsRead)
		s.DocsWritten = max(s.DocsWritten, h.DocsWritten)
		s.DocWriteFailures = max(s.DocWriteFailures, h.DocWriteFailures)
		s.BulkGetDocs = max(s.BulkGetDocs, h.BulkGetDocs)
		s.BulkGetAttempts = max(s.BulkGetAttempts, h.BulkGetAttempts)
	}
	c.missingChecked.Store(s.RevisionsChecked)
	c.missingFound.Store(s.MissingRevisionsFound)
	c.docsRead.Store(s.DocsRead)
	c.docsWritten.Store(s.DocsWritten)
	c.docWriteFailures.Store(s.DocWriteFailures)
	c.bulkGetDocs.Store(s.BulkGetDocs)
	c.bulkGetAttempts.Store(s.BulkGetAttempts)
	c.failures.seed(s.FailedDocs, s.DocWriteFailuresByReason)
}

// sum is a cheap fingerprint telling whether any counter moved.
func (c *counters) sum() int64 {
	return c.missingChecked.Load() + c.missingFound.Load() + c.docsRead.Load() + c.docsWritten.Load() +
		c.docWriteFailures.Load() + c.bulkGetDocs.Load() + c.bulkGetAttempts.Load()
}

// pendingCount returns changes_pending as last measured (nil: unknown).
func (c *counters) pendingCount() *int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending
}

func (c *counters) setPending(p *int64) {
	c.mu.Lock()
	c.pending = p
	c.mu.Unlock()
}

func (c *counters) setCheckpointed(seq json.RawMessage) {
	c.mu.Lock()
	c.checkpointed = seq
	c.mu.Unlock()
}

// snapshot returns the stats with the given seqs.
func (c *counters) snapshot(through, source json.RawMessage) Stats {
	c.mu.Lock()
	pending, checkpointed := c.pending, c.checkpointed
	c.mu.Unlock()
	if checkpointed == nil {
		checkpointed = json.RawMessage("null")
	}
	failed, byReason := c.failures.snapshot()
	return Stats{
		RevisionsChecked:      c.missingChecked.Load(),
		MissingRevisionsFound: c.missingFound.Load(),
		DocsRead:              c.docsRead.Load(),
		DocsWritten:           c.docsWritten.Load(),
		DocWriteFailures:      c.docWriteFailures.Load(),
		ChangesPending:        pending,
		BulkGetDocs:           c.bulkGetDocs.Load(),
		BulkGetAttempts:       c.bulkGetAttempts.Load(),
		CheckpointedSourceSeq: checkpointed,
		SourceSeq:             source,
		ThroughSeq:            through,

		DocWriteFailuresByReason: byReason,
		FailedDocs:               failed,
	}
}
