package couchclient

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Host budgets: the replications talking to one server share its budget.
//
// Every request to a server (scheme, host and port: both endpoints of
// every job of the Pool, couchrep's too) draws on one budget, so that
// the jobs behave towards the server as one well-mannered client rather
// than hundreds of independent ones:
//
//   - at most `[replicator] max_requests_per_host` requests are in
//     flight (infinity by default: CouchDB has no such bound);
//   - a 429 or 503 answer cuts the server's congestion window in half,
//     once per round (answers to requests sent before the last cut do not
//     cut again), and every other answer widens it by 1/window, about one
//     request per round trip: AIMD across jobs. The window exists only
//     once the server has signalled congestion, and goes once it has
//     grown past what the jobs ask for at once;
//   - a `Retry-After` on a 429 or 503 (seconds or an HTTP date) holds
//     every request to the server, feeds being reopened included, until
//     it passes (at most maxHold).
//
// A request counts from when it is sent until its answer is in: the
// whole body of a buffered answer, the headers of a streamed one (a
// feed, a document with attachments), since a job reading a streamed
// answer may write what it reads to the same server. Feeds wait out
// holds but take no place: they stay open for hours. Waiting requests
// are served oldest first.
//
// The budget sits under the per-endpoint rate limiter (ratelimit.go,
// CouchDB's, still applied per URL and method) and the batch turns
// (turns.go): a batch write first waits its turn, then its place.

// maxHold bounds a Retry-After hold: a request is not retried for longer
// than health_threshold/2 (60 s by default) either, and a longer hold
// would pass stall_timeout_sec for every job of the server.
const maxHold = 60 * time.Second

// windowCut is the multiplicative decrease of the congestion window.
const windowCut = 0.5

// hostBudget is the request budget of one server.
type hostBudget struct {
	key  string // scheme://host:port, as logs show it (no credentials)
	pool *Pool

	mu       sync.Mutex
	inflight int             // requests holding a place
	waiting  []*budgetWaiter // oldest first; only place-takers wait while no hold is in force
	// window is the congestion window (0: none); epoch counts its cuts;
	// peak is the most requests in flight or waiting since the last cut.
	window float64
	epoch  uint64
	peak   int
	// holding is set from a hold's start until its timer has let the
	// waiters go; holdUntil is when it ends.
	holding   bool
	holdUntil time.Time
	holdTimer *time.Timer
}

// budgetWaiter is a request waiting for its server's budget.
type budgetWaiter struct {
	ch    chan struct{} // closed when given
	place bool          // takes a place (a feed does not)
	epoch uint64        // the window's epoch when given
}

// budgetTicket is one request's draw on its server's budget: give it
// back with done once its answer is in (or the request failed).
type budgetTicket struct {
	b     *hostBudget
	epoch uint64
	place bool
	once  sync.Once
}

// budgetOf returns the budget of the server at key (parse.Origin).
func (p *Pool) budgetOf(key string) *hostBudget {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.budgets[key]
	if b == nil {
		b = &hostBudget{key: key, pool: p}
		p.budgets[key] = b
	}
	return b
}

// limit is max_requests_per_host in force (0: none).
func (b *hostBudget) limit() int { return b.pool.settings.Load().opts.MaxRequestsPerHost }

// acquire waits until a request may be sent to the server: no hold in
// force and, when it takes a place, room in the budget. The error is ctx's.
func (b *hostBudget) acquire(ctx context.Context, place bool) (*budgetTicket, error) {
	now := time.Now()
	b.mu.Lock()
	if !b.heldLocked(now) && (!place || len(b.waiting) == 0 && b.roomLocked()) {
		if place {
			b.inflight++
			b.notePeakLocked()
		}
		t := &budgetTicket{b: b, epoch: b.epoch, place: place}
		b.mu.Unlock()
		return t, nil
	}
	w := &budgetWaiter{ch: make(chan struct{}), place: place}
	b.waiting = append(b.waiting, w)
	b.notePeakLocked()
	b.mu.Unlock()
	b.pool.stats.hostWaits.Add(1)
	b.pool.budgetWaiting.Add(1)
	defer b.pool.budgetWaiting.Add(-1)
	select {
	case <-w.ch:
		return &budgetTicket{b: b, epoch: w.epoch, place: place}, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	for i, o := range b.waiting {
		if o == w {
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			b.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	b.mu.Unlock()
	// Given as ctx ended: hand it on.
	(&budgetTicket{b: b, epoch: w.epoch, place: place}).done()
	return nil, ctx.Err()
}

// held reports whether a hold is in force.
func (b *hostBudget) held() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heldLocked(time.Now())
}

// errHeld is the error of an attempt not sent because a hold began while
// it was being prepared (by its own session login's answer, say): it is
// tried again once the hold has passed, without spending a retry.
var errHeld = errors.New("held by the server's Retry-After")

// heldLocked reports whether a hold is in force at now.
func (b *hostBudget) heldLocked(now time.Time) bool { return b.holding && now.Before(b.holdUntil) }

// roomLocked reports whether one more request may take a place.
func (b *hostBudget) roomLocked() bool {
	if n := b.limit(); n > 0 && b.inflight >= n {
		return false
	}
	return b.window == 0 || b.inflight < max(1, int(b.window))
}

func (b *hostBudget) notePeakLocked() { b.peak = max(b.peak, b.inflight+len(b.waiting)) }

// dispatchLocked gives the waiters what is free: everything once no hold
// is in force to those taking no place, places in order to the others.
func (b *hostBudget) dispatchLocked(now time.Time) {
	if len(b.waiting) == 0 || b.heldLocked(now) {
		return
	}
	kept := b.waiting[:0]
	full := false
	for _, w := range b.waiting {
		if w.place {
			if full || !b.roomLocked() {
				full = true
				kept = append(kept, w)
				continue
			}
			b.inflight++
		}
		w.epoch = b.epoch
		close(w.ch)
	}
	clear(b.waiting[len(kept):])
	b.waiting = kept
}

// observe takes what the answer to the ticket's request tells about the
// server (hostBudget.observe).
func (t *budgetTicket) observe(status int, h http.Header) { t.b.observe(t, status, h) }

// observe takes what an answer tells about the server: a 429 or 503 cuts
// the window (once per round) and its Retry-After holds the server's
// requests; any other answer widens the window. t is nil for an answer no
// place stands for (a session login's): it may only hold.
func (b *hostBudget) observe(t *budgetTicket, status int, h http.Header) {
	now := time.Now()
	congested := status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
	hold, hasHold := time.Duration(0), false
	if congested {
		hold, hasHold = retryAfter(h.Get("Retry-After"), now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case congested:
		if t != nil && t.epoch == b.epoch {
			b.cutLocked()
		}
		if hasHold {
			b.holdLocked(now, hold, status)
		}
	case t == nil:
	case b.window > 0:
		b.window += 1 / b.window
		if n := b.limit(); n > 0 && b.window >= float64(n) || b.window >= float64(b.peak) {
			b.window = 0
			b.pool.hostsCongested.Add(-1)
			b.pool.log.Info("server no longer signals congestion: its requests are no longer limited", "host", b.key)
		}
		b.dispatchLocked(now)
	}
}

// cutLocked halves the congestion window, creating it from the requests
// in flight when there was none.
func (b *hostBudget) cutLocked() {
	base := b.window
	if base == 0 {
		base = float64(b.inflight)
		if n := b.limit(); n > 0 {
			base = min(base, float64(n))
		}
		b.pool.hostsCongested.Add(1)
		b.pool.log.Info("server signals congestion (429 or 503): its requests share a window", "host", b.key,
			"window", max(1, int(base*windowCut)))
	}
	b.window = max(1, base*windowCut)
	b.epoch++
	b.peak = b.inflight + len(b.waiting)
	b.pool.stats.hostCuts.Add(1)
	b.pool.log.Debug("congestion window cut", "host", b.key, "window", b.window)
}

// holdLocked holds the server's requests for d from now (at most maxHold),
// unless a hold already lasts longer.
func (b *hostBudget) holdLocked(now time.Time, d time.Duration, status int) {
	d = min(d, maxHold)
	until := now.Add(d)
	if d <= 0 || b.holding && !until.After(b.holdUntil) {
		return
	}
	b.pool.stats.hostHolds.Add(1)
	if !b.holding {
		b.holding = true
		b.pool.hostsHeld.Add(1)
		b.pool.log.Info("server asked to wait (Retry-After): holding every request to it", "host", b.key,
			"status", status, "wait", d.String())
	}
	b.holdUntil = until
	if b.holdTimer == nil {
		b.holdTimer = time.AfterFunc(d, b.endHold)
	} else {
		b.holdTimer.Reset(d)
	}
}

// close ends a hold at once and stops its timer, whose callback would
// otherwise run on the closed pool up to maxHold later.
func (b *hostBudget) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holdTimer != nil {
		b.holdTimer.Stop()
	}
	if b.holding {
		b.holding = false
		b.pool.hostsHeld.Add(-1)
		b.dispatchLocked(time.Now())
	}
}

// endHold lets the waiters go once the hold has passed.
func (b *hostBudget) endHold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if !b.holding {
		return
	}
	if now.Before(b.holdUntil) { // extended since the timer was set
		b.holdTimer.Reset(b.holdUntil.Sub(now))
		return
	}
	b.holding = false
	b.pool.hostsHeld.Add(-1)
	b.dispatchLocked(now)
}

// done gives the ticket's place back (once).
func (t *budgetTicket) done() {
	t.once.Do(func() {
		if !t.place {
			return
		}
		b := t.b
		b.mu.Lock()
		b.inflight--
		b.dispatchLocked(time.Now())
		b.mu.Unlock()
	})
}

// retryAfter reads a Retry-After value, delay-seconds or an HTTP date,
// as the wait from now; false when there is none or it does not parse.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

// BudgetState is what the host budgets hold at the moment of the call
// (gauges, for Prometheus).
type BudgetState struct {
	// Waiting is the requests waiting for their server's budget.
	Waiting int64
	// HostsHeld is the servers whose requests a Retry-After holds.
	HostsHeld int64
	// HostsCongested is the servers with a congestion window in force.
	HostsCongested int64
}

// BudgetState returns the state of the pool's host budgets: counters
// kept as requests come and go, so reading it costs the same whatever
// the number of jobs or servers.
func (p *Pool) BudgetState() BudgetState {
	return BudgetState{Waiting: p.budgetWaiting.Load(), HostsHeld: p.hostsHeld.Load(), HostsCongested: p.hostsCongested.Load()}
}
