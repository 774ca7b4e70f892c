package replicate

import (
	"context"
	"math/rand/v2"
	"time"
)

// idleNotice is how long a caught-up continuous run receives nothing
// before OnIdle(true).
const idleNotice = time.Second

// timers does a run's periodic work, in one goroutine since thousands of
// runs may be live at once and every goroutine's stack is scanned at each
// GC: a checkpoint every checkpoint_interval; stats reported when they
// changed, at most once a second, with changes_pending asked of the source
// every pendingInterval; and the idle watch of a continuous run (see
// idleWatch). A checkpoint delays the other steps by its requests; the
// pending probe runs beside them (one at a time), so that a source that
// does not answer it delays no watch.
func (r *run) timers(ctx context.Context, fail func(error), buffered chan change, park func()) {
	step := statsMinInterval
	var cpEvery time.Duration
	if r.rep.UseCheckpoints {
		if cpEvery = time.Duration(r.rep.CheckpointInterval) * time.Millisecond; cpEvery <= 0 {
			cpEvery = 30 * time.Second
		}
		step = min(step, cpEvery)
	}
	idle := r.newIdleWatch(buffered)
	if idle != nil {
		step = min(step, idle.tick)
	}
	stall := r.newStallWatch(buffered)
	t := time.NewTicker(step)
	defer t.Stop()
	start := time.Now()
	// The first checkpoint comes after half the interval to a whole one,
	// at random: the jobs woken together by one write (a fan-out of
	// thousands) would otherwise write their checkpoints, four requests
	// each, all at once every interval.
	nextCheckpoint, nextStats := start.Add(cpEvery/2+rand.N(cpEvery/2+1)), start.Add(statsMinInterval)
	var lastPending time.Time
	var probe chan struct{} // closed when the running probe ends; nil: none
	defer func() {
		if probe != nil {
			<-probe
		}
	}()
	lastSum := int64(-1)
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		}
		if cpEvery > 0 && !now.Before(nextCheckpoint) {
			if err := r.checkpoint(ctx); err != nil && ctx.Err() == nil {
				fail(err)
				cpEvery = 0 // the run is ending: no more checkpoints
			}
			nextCheckpoint = time.Now().Add(cpEvery)
		}
		if !now.Before(nextStats) {
			nextStats = now.Add(statsMinInterval)
			// A quiet run replicated all it read and reads nothing: no
			// pending to ask its source for.
			if probe != nil && isClosed(probe) {
				probe, lastPending = nil, time.Now()
				lastSum = -1
			}
			if probe == nil && time.Since(lastPending) >= pendingInterval && !r.quiet.Load() {
				probe = make(chan struct{})
				go func(done chan struct{}) {
					defer close(done)
					r.updatePending(ctx)
				}(probe)
			}
			if s := r.stats.sum(); s != lastSum && r.opts.OnStats != nil {
				lastSum = s
				r.opts.OnStats(r.snapshot())
			}
		}
		if idle != nil && idle.check(park) {
			idle = nil
		}
		if stall != nil {
			if err := stall.check(now); err != nil {
				fail(err)
				stall = nil
			}
		}
	}
}

// idleWatch watches a continuous run for idleness: caught up (no batch
// formed or in flight, nothing buffered) and no change received. It
// reports transitions to OnIdle and parks the run once it has been idle
// for IdleAfter.
type idleWatch struct {
	r        *run
	buffered chan change
	notice   time.Duration // idle for this long: OnIdle(true)
	after    time.Duration // idle for this long: park (0: never)
	tick     time.Duration // how often to look
	idle     bool
}

// newIdleWatch returns the run's idle watch, nil when it needs none.
func (r *run) newIdleWatch(buffered chan change) *idleWatch {
	after := r.opts.IdleAfter
	if !r.rep.Continuous || after <= 0 && r.opts.OnIdle == nil {
		return nil
	}
	w := &idleWatch{r: r, buffered: buffered, notice: idleNotice, after: after}
	if after > 0 {
		w.notice = min(w.notice, after)
	}
	w.tick = min(max(w.notice/4, 50*time.Millisecond), time.Second)
	if r.opts.OnIdle == nil {
		// Only parking to time: thousands of runs need not look 4 times a second.
		w.tick = min(max(after/16, 50*time.Millisecond), 5*time.Second)
	}
	r.lastChange.Store(time.Now().UnixNano())
	return w
}

// check looks once; it reports true when it parked the run.
func (w *idleWatch) check(park func()) bool {
	r := w.r
	quiet := time.Since(time.Unix(0, r.lastChange.Load()))
	caught := len(w.buffered) == 0 && !r.tracker.busy()
	if now := caught && quiet >= w.notice; now != w.idle {
		w.idle = now
		if r.opts.OnIdle != nil {
			r.opts.OnIdle(w.idle)
		}
	}
	if caught && w.after > 0 && quiet >= w.after {
		park()
		return true
	}
	return false
}
