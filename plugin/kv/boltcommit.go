package kv

import (
	"context"
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// maxGroup bounds how many Updates share one bbolt commit.
const maxGroup = 128

// groupCommit is the bolt backend's group commit: one goroutine takes every
// Update queued while the previous commit was running and applies them, in
// queue order, in one bbolt transaction (one fsync). A lone Update commits
// at once, so grouping adds no latency when writes are rare; under load
// (many jobs waking, accepting and parking at once) it turns N fsyncs into
// one. Each Update stays its own logical transaction: it sees the writes of
// the ones before it, gets its own versionstamp (the commit's version, its
// place in the group as batch order) and fires its own watches.
//
// Invariant: when any function of a group fails, the group's transaction is
// rolled back and every function is run again in a transaction of its own,
// so one failing (or conflicting) Update never fails or delays the others
// beyond one extra commit. A group (or lone Update) that wrote nothing is
// rolled back instead of committed: it has no effect to make durable.
type groupCommit struct {
	db      *bolt.DB
	watches *watchRegistry
	reqs    chan *update
	quit    chan struct{} // closed by stop
	stopped chan struct{} // closed when loop has returned

	mu     sync.RWMutex // read-held while queueing; stop takes it to close
	closed bool
}

type update struct {
	fn  func(Tx) error
	err chan error // buffered: the outcome
}

func startGroupCommit(db *bolt.DB, watches *watchRegistry) *groupCommit {
	g := &groupCommit{db: db, watches: watches, reqs: make(chan *update, maxGroup),
		quit: make(chan struct{}), stopped: make(chan struct{})}
	go g.loop()
	return g
}

// do queues fn and waits for its outcome. Once queued, fn may commit: the
// outcome is awaited regardless of ctx, so a durable write is never
// reported as failed.
func (g *groupCommit) do(ctx context.Context, fn func(Tx) error) error {
	u := &update{fn: fn, err: make(chan error, 1)}
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return ErrClosed
	}
	select {
	case g.reqs <- u:
		g.mu.RUnlock()
	case <-ctx.Done():
		g.mu.RUnlock()
		return ctx.Err()
	}
	return <-u.err
}

// stop commits what is queued and ends the loop; later Updates get ErrClosed.
func (g *groupCommit) stop() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.quit)
	}
	g.mu.Unlock()
	<-g.stopped
}

func (g *groupCommit) loop() {
	defer close(g.stopped)
	group := make([]*update, 0, maxGroup)
	for {
		group = group[:0]
		select {
		case u := <-g.reqs:
			group = append(group, u)
		case <-g.quit:
			for { // nothing can be queued any more: drain and return
				select {
				case u := <-g.reqs:
					g.commit([]*update{u})
				default:
					return
				}
			}
		}
	fill:
		for len(group) < maxGroup {
			select {
			case u := <-g.reqs:
				group = append(group, u)
			default:
				break fill
			}
		}
		g.commit(group)
	}
}

// commit applies group in one transaction, or each alone when that fails.
func (g *groupCommit) commit(group []*update) {
	if len(group) == 1 {
		group[0].err <- g.solo(group[0].fn)
		return
	}
	txs := make([]*boltTx, len(group))
	err := g.db.Update(func(tx *bolt.Tx) error {
		version := &groupVersion{}
		wrote := false
		for i, u := range group {
			t := newBoltTx(tx, version, uint16(i))
			if err := u.fn(t); err != nil {
				return err
			}
			if t.err != nil {
				return t.err
			}
			txs[i] = t
			wrote = wrote || t.wrote()
		}
		if !wrote {
			return errNothingWritten
		}
		return nil
	})
	if errors.Is(err, errNothingWritten) {
		err = nil
	}
	if err != nil {
		for _, u := range group {
			u.err <- g.solo(u.fn)
		}
		return
	}
	for i, u := range group {
		g.watches.fire(&txs[i].writes)
		u.err <- nil
	}
}

// errNothingWritten rolls back a transaction none of whose Updates wrote:
// committing it would only rewrite the meta page and fsync (an accept
// finding nothing due, many times per woken job, is such an Update).
var errNothingWritten = errors.New("kv: nothing written")

// solo runs fn in a transaction of its own, retrying on ErrConflict.
func (g *groupCommit) solo(fn func(Tx) error) error {
	for attempt := 0; ; attempt++ {
		var t *boltTx
		err := g.db.Update(func(tx *bolt.Tx) error {
			t = newBoltTx(tx, &groupVersion{}, 0)
			if err := fn(t); err != nil {
				return err
			}
			if t.err == nil && !t.wrote() {
				return errNothingWritten
			}
			return t.err
		})
		if errors.Is(err, errNothingWritten) {
			err = nil
		}
		if err != nil {
			if errors.Is(err, ErrConflict) && attempt < maxRetries {
				continue
			}
			return mapBoltErr(err)
		}
		g.watches.fire(&t.writes)
		return nil
	}
}

// groupVersion is the commit version shared by the Updates of one group,
// taken from the persisted counter the first time one of them asks.
type groupVersion struct {
	version uint64
	taken   bool
}
