package jobserver

import (
	"context"
	"slices"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// Slots: max_jobs bounds the workers that hold a slot, the ones
// replicating. A continuous job whose source can be watched (the jobs
// that may park) is gated: when a job waits for a slot, the gated job
// holding one the longest is asked for it; it stops its feed, replicates
// what there is (a round) and hands its slot on, then reads nothing
// (quiet) until its source changes, and waits in turn for a slot
// (replicate.Slot). As many holders are asked as jobs wait, so a waiter
// costs one holder's round, not every holder's feed. A quiet job stays
// accepted, with its replication's state in memory, so coming back costs
// one _changes read, not a park and a restart. At most max_jobs jobs are
// quiet; beyond that the one quiet the longest is parked.

// SourceWatch signals the changes of one source to a quiet job (package
// park's Watch).
type SourceWatch interface {
	// Next returns a channel closed at the first change of the source
	// after the call; false when the source cannot be watched now.
	Next() (<-chan struct{}, bool)
	// Close ends the watch.
	Close()
}

// slotWait bounds how long a job accepted while every slot is held
// waits for one before it is given back to the queue.
const slotWait = 10 * time.Second

// slotWaiter is a worker waiting for a slot.
type slotWaiter struct {
	w       *worker
	granted chan struct{} // closed once w holds a slot
}

// holdLocked gives w a slot. Callers hold s.mu.
func (s *Server) holdLocked(w *worker) {
	if w.holding {
		return
	}
	w.holding = true
	w.heldSince = s.now()
	w.holds++
	s.active++
	s.heldByKey[w.key]++
	s.queueHolderLocked(w)
}

// queueHolderLocked adds w's current hold to s.holders. Entries are
// taken only while jobs wait, so stale ones are dropped here once they
// outnumber the workers: the queue stays O(workers). Callers hold s.mu.
func (s *Server) queueHolderLocked(w *worker) {
	if len(s.holders) >= 2*len(s.workers)+64 {
		s.holders = slices.DeleteFunc(s.holders, func(h holder) bool { return !h.w.holding || h.w.holds != h.holds })
		s.holders = slices.Clip(s.holders)
	}
	s.holders = append(s.holders, holder{w, w.holds})
}

// holder is an entry of Server.holders: w took a slot, its holds-th.
type holder struct {
	w     *worker
	holds uint64
}

// releaseLocked takes w's slot back and hands it on. Callers hold s.mu.
func (s *Server) releaseLocked(w *worker) {
	if !w.holding {
		return
	}
	w.holding = false
	if w.asked {
		w.asked = false
		s.asked--
	}
	w.quietSince = s.now()
	s.active--
	if s.heldByKey[w.key]--; s.heldByKey[w.key] <= 0 {
		delete(s.heldByKey, w.key)
	}
	s.grantLocked()
}

// grantLocked hands free slots to the waiters, oldest first, and asks
// for as many slots as jobs still wait. Callers hold s.mu.
func (s *Server) grantLocked() {
	max := s.config().MaxJobs
	for s.active < max && len(s.waiters) > 0 {
		wt := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		s.holdLocked(wt.w)
		close(wt.granted)
	}
	s.askLocked()
}

// askLocked asks gated holders for their slots until as many are asked
// as jobs wait: the ones holding theirs the longest first. Callers hold
// s.mu.
func (s *Server) askLocked() {
	for s.asked < len(s.waiters) {
		best := s.nextAskableLocked()
		if best == nil {
			return
		}
		best.asked = true
		s.asked++
		select {
		case best.gate.yield <- struct{}{}:
		default:
		}
	}
}

// nextAskableLocked takes from s.holders, oldest first, the first holder
// that can be asked for its slot: still in the hold it was queued for,
// gated, not asked yet and not stopping. The ones it passes cannot be
// asked during that hold (a worker whose gate is set later is queued
// again then, see setGateLocked), so asking costs O(1) amortized, not a scan of
// every worker. Callers hold s.mu.
func (s *Server) nextAskableLocked() *worker {
	for len(s.holders) > 0 {
		h := s.holders[0]
		s.holders[0] = holder{}
		s.holders = s.holders[1:]
		if w := h.w; w.holding && w.holds == h.holds && w.gate != nil && !w.asked && w.stopCause() == nil {
			return w
		}
	}
	return nil
}

// setGateLocked sets or clears w's gate. A gated holder becomes one that
// may be asked for its slot, at once if a job waits. Callers hold s.mu.
func (s *Server) setGateLocked(w *worker, g *gate) {
	w.gate = g
	if g != nil && w.holding {
		s.queueHolderLocked(w)
		s.askLocked()
	}
}

// acquire waits until w holds a slot or ctx ends: at once while a slot is
// free and nobody waits, else in turn.
func (s *Server) acquire(ctx context.Context, w *worker) error {
	s.mu.Lock()
	if w.holding {
		s.mu.Unlock()
		return nil
	}
	if s.active < s.config().MaxJobs && len(s.waiters) == 0 {
		s.holdLocked(w)
		s.mu.Unlock()
		return nil
	}
	wt := &slotWaiter{w: w, granted: make(chan struct{})}
	s.waiters = append(s.waiters, wt)
	s.askLocked()
	s.mu.Unlock()
	select {
	case <-wt.granted:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-wt.granted:
		s.releaseLocked(w)
	default:
		for i, x := range s.waiters {
			if x == wt {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
		s.grantLocked()
	}
	return ctx.Err()
}

// release takes w's slot back: w is caught up and reads nothing.
func (s *Server) release(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.holding {
		s.counts.handoffs.Add(1)
	}
	s.releaseLocked(w)
	s.boundQuietLocked()
}

// boundQuietLocked parks the jobs quiet the longest while more than
// max_jobs workers hold no slot. Callers hold s.mu.
func (s *Server) boundQuietLocked() {
	limit := s.config().MaxJobs
	if len(s.workers)-s.active <= limit {
		return
	}
	var quiet []*worker
	n := 0
	for _, w := range s.workers {
		if w.holding || w.stopCause() != nil {
			continue
		}
		n++
		if w.gate != nil && !w.waiting() {
			quiet = append(quiet, w)
		}
	}
	for n > limit && len(quiet) > 0 {
		k := 0
		for i, w := range quiet {
			if w.quietSince.Before(quiet[k].quietSince) {
				k = i
			}
		}
		quiet[k].stop(errPark)
		quiet[k] = quiet[len(quiet)-1]
		quiet = quiet[:len(quiet)-1]
		n--
	}
}

// anyGatedLocked reports whether a gated worker holds a slot (gatedLocked
// > 0), stopping at the first: accepts ask it while every slot is held,
// and nearly every holder is gated when thousands of jobs run. Callers
// hold s.mu.
func (s *Server) anyGatedLocked() bool {
	for _, w := range s.workers {
		if w.holding && w.gate != nil && w.stopCause() == nil {
			return true
		}
	}
	return false
}

// gatedLocked counts the gated workers holding a slot: the ones that hand
// it on once caught up when a job waits. Callers hold s.mu.
func (s *Server) gatedLocked() int {
	n := 0
	for _, w := range s.workers {
		if w.holding && w.gate != nil && w.stopCause() == nil {
			n++
		}
	}
	return n
}

// gate is a gated worker's replicate.Slot.
type gate struct {
	s     *Server
	w     *worker
	watch SourceWatch
	// yield receives when the server asks for the slot.
	yield chan struct{}
	// wait is set while the replication waits for a slot.
	wait bool
}

// Yield receives when a job waits for the slot this one holds.
func (g *gate) Yield() <-chan struct{} { return g.yield }

// Next returns the source's next change signal.
func (g *gate) Next() (<-chan struct{}, bool) { return g.watch.Next() }

// Release hands the slot on.
func (g *gate) Release() { g.s.release(g.w) }

// Acquire waits for a slot.
func (g *gate) Acquire(ctx context.Context) error {
	g.s.mu.Lock()
	g.wait = true
	g.s.mu.Unlock()
	err := g.s.acquire(ctx, g.w)
	g.s.mu.Lock()
	g.wait = false
	g.s.mu.Unlock()
	return err
}

// waiting reports whether w's replication waits for a slot. Callers hold s.mu.
func (w *worker) waiting() bool { return w.gate != nil && w.gate.wait }

// newGate returns the gate of a worker running rep, nil when it is not
// gated (no Parker, parking off, not continuous, no checkpoints, or a
// source that cannot be watched). Close its watch when the run ends.
func (s *Server) newGate(w *worker, rep *parse.Rep, cfg Config) *gate {
	if s.opts.Parker == nil || cfg.IdlePark <= 0 || !rep.Continuous || !rep.UseCheckpoints || !s.opts.Parker.Watchable(rep.Source) {
		return nil
	}
	watch := s.opts.Parker.Watch(rep.Source, rep)
	if watch == nil {
		return nil
	}
	return &gate{s: s, w: w, watch: watch, yield: make(chan struct{}, 1)}
}
