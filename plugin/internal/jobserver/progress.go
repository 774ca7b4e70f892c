package jobserver

import (
	"context"
	"sync"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// progress is what a running job's record says of its run: the latest
// stats the run reported and the last ones written to the queue.
type progress struct {
	w   *worker
	cfg Config

	// mu guards the fields below and rec, and is held while rec is
	// written, so that a checkpoint's write and a push do not interleave.
	mu         sync.Mutex
	rec        *jobdata.Record
	latest     jobdata.Stats
	pushed     jobdata.Stats
	pushedOnce bool
}

// set notes the run's latest stats.
func (p *progress) set(st replicate.Stats) {
	p.mu.Lock()
	p.latest = jobdata.Stats(st)
	p.mu.Unlock()
}

// push writes the latest stats to the job's record, unless they are the
// ones last written (a failed write is retried at the next push), or the
// node's lease is strained: a push is load that can wait for the next
// one, and a lease whose renewals do not get through is lost with every
// job under it.
func (p *progress) push(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pushedOnce && statsEqual(p.latest, p.pushed) {
		return // nothing new to record
	}
	if p.w.lease != nil && p.w.lease.Strained() {
		return
	}
	if err := p.w.record(ctx, p.rec, p.latest, p.cfg); err == nil {
		p.pushed, p.pushedOnce = p.latest, true
	}
}

// checkpointed notes that the latest stats were written by the
// checkpoint just made (BeforeCheckpoint writes them).
func (p *progress) checkpointed() {
	p.mu.Lock()
	p.pushed, p.pushedOnce = p.latest, true
	p.mu.Unlock()
}

// final returns the latest stats, the ones the job settles with.
func (p *progress) final() jobdata.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest
}

// filterCheck re-checks a user filter's code, which is part of the
// replication id, after each checkpoint and at least every filterRecheck
// (a failed check is retried at the next tick); a changed id cancels the
// run with errRepIDChanged.
type filterCheck struct {
	w      *worker
	rep    *parse.Rep
	repID  parse.RepID
	cancel context.CancelCauseFunc

	due  bool      // a check is owed
	last time.Time // when the last check began
}

// tick runs a check when one is owed or filterRecheck has passed.
func (f *filterCheck) tick(ctx context.Context) {
	if !isUserFilter(f.rep.Filter) {
		return
	}
	if f.w.s.now().Sub(f.last) >= filterRecheck {
		f.due = true
	}
	if f.due {
		f.check(ctx)
	}
}

// afterCheckpoint runs a check after a checkpoint.
func (f *filterCheck) afterCheckpoint(ctx context.Context) {
	if isUserFilter(f.rep.Filter) {
		f.due = true
		f.check(ctx)
	}
}

func (f *filterCheck) check(ctx context.Context) {
	s := f.w.s
	f.last = s.now()
	idCtx, cancel := context.WithTimeout(ctx, TypeTimeout/2)
	nid, err := s.opts.RepID(idCtx, f.rep)
	cancel()
	switch {
	case err != nil:
		s.log.Debug("filter re-check failed, retrying", "job", f.w.job.ID, "error", err)
	case nid != f.repID:
		s.log.Info("filter changed, restarting replication", "job", f.w.job.ID, "old", f.repID.String(), "new", nid.String())
		f.cancel(errRepIDChanged)
		f.due = false
	default:
		f.due = false
	}
}
