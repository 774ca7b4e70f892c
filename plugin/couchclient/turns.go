package couchclient

import (
	"context"
	"sync"
)

// Batch turns: the replications writing into one server take turns.
//
// Hundreds of jobs replicating into one server would each send their
// batches as soon as they have them; the server (and this process) then
// share their CPU among all of them, every batch write takes as long as a
// whole generation of them does, and a change waits that long at each
// step. A Pool lets at most `[replicator] max_batches_per_host` batch
// writes (_revs_diff, _bulk_docs: Request.Turn) to one target server
// (scheme, host and port) be in flight; the others wait their turn,
// oldest first. The same work is done in the same time, but each write in
// its own: a change reaches the target a turn after its job reads it, not
// a generation of writes later. Reads from sources take no turn, so a
// slow source never holds up the writes of other jobs into a server.
//
// Invariants: a server's turns taken never exceed the limit in force
// when the last one was given; waiters exist only while turns are taken,
// so a turn done comes to give them theirs, oldest first.

// hostTurns are the turns of one target server.
type hostTurns struct {
	mu      sync.Mutex
	taken   int
	waiting []chan struct{} // oldest first; closed when given a turn
}

// turnsOf returns the turns of the server at key (parse.Origin: scheme://host:port).
func (p *Pool) turnsOf(key string) *hostTurns {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.turns[key]
	if t == nil {
		t = &hostTurns{}
		p.turns[key] = t
	}
	return t
}

// take waits for a turn; limit gives the bound in force (0: none).
func (t *hostTurns) take(ctx context.Context, limit func() int, waited func()) error {
	t.mu.Lock()
	if n := limit(); n <= 0 || t.taken < n && len(t.waiting) == 0 {
		t.taken++
		t.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	t.waiting = append(t.waiting, ch)
	t.mu.Unlock()
	waited()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for i, w := range t.waiting {
		if w == ch {
			t.waiting = append(t.waiting[:i], t.waiting[i+1:]...)
			t.mu.Unlock()
			return ctx.Err()
		}
	}
	t.mu.Unlock()
	// Given a turn as ctx ended: hand it on.
	t.give(limit)
	return ctx.Err()
}

// give returns a turn and hands free turns to the oldest waiters.
func (t *hostTurns) give(limit func() int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.taken--
	n := limit()
	for len(t.waiting) > 0 && (n <= 0 || t.taken < n) {
		close(t.waiting[0])
		t.waiting[0] = nil
		t.waiting = t.waiting[1:]
		t.taken++
	}
}

// takeTurn waits until the client may send a batch write to its server
// (Request.Turn) and returns the func that gives the turn back; an error
// is ctx's.
func (c *Client) takeTurn(ctx context.Context) (done func(), err error) {
	t := c.turns
	limit := func() int { return c.pool.settings.Load().opts.BatchesPerHost() }
	if err := t.take(ctx, limit, func() { c.pool.stats.batchWaits.Add(1) }); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { t.give(limit) }) }, nil
}
