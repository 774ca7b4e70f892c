package jobs

import (
	"bytes"
	"context"
	"sync"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Event is one state transition of a subscribed job. Data is the job's data
// when the event was delivered (nil for NotFound).
type Event struct {
	ID    string
	State State
	Data  []byte
}

// Subscription delivers the transitions of one job, in commit order, after
// the state returned by Subscribe. A Running event is sent for every Update
// as well. Events are kept in the store's transition log for
// Options.EventRetention; a subscriber that lags longer may miss some.
type Subscription struct {
	n     *notifier
	id    string
	begin []byte // transition-log key from which this subscription still needs events
	ch    chan Event

	mu      sync.Mutex
	queue   []Event
	wake    chan struct{}
	done    chan struct{}
	closeMu sync.Once
}

// Events returns the channel of transitions; it is closed by Close (or when
// the queue is closed).
func (s *Subscription) Events() <-chan Event { return s.ch }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.closeMu.Do(func() {
		close(s.done)
		s.n.remove(s)
	})
}

func (s *Subscription) push(ev Event) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pump moves queued events to the channel without ever blocking the notifier.
func (s *Subscription) pump(closed <-chan struct{}) {
	defer close(s.ch)
	for {
		s.mu.Lock()
		var ev *Event
		if len(s.queue) > 0 {
			ev = &s.queue[0]
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
		if ev == nil {
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			case <-closed:
				return
			}
		}
		select {
		case s.ch <- *ev:
		case <-s.done:
			return
		case <-closed:
			return
		}
	}
}

// Subscribe returns a subscription to job typ/id with its current state and
// data (ErrNotFound if the job does not exist). Unlike couch_jobs, a
// finished job also gets a subscription, which sees it if it is re-added.
func (q *Queue) Subscribe(ctx context.Context, typ, id string) (*Subscription, State, []byte, error) {
	var st State
	var data []byte
	var begin []byte
	err := q.store.View(ctx, func(t kv.ReadTx) error {
		r, err := q.jobRow(t, typ, id)
		if err != nil {
			return err
		}
		st = r.State()
		if data, err = q.readData(t, typ, id, r); err != nil {
			return err
		}
		var vs kv.Versionstamp
		w, err := t.Get(q.l.watermark(typ))
		if err != nil {
			return err
		}
		copy(vs[:], w)
		begin = kv.PrefixEnd(q.l.logAt(typ, vs))
		return nil
	})
	if err != nil {
		return nil, "", nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-q.closed:
		return nil, "", nil, ErrClosed
	default:
	}
	n := q.notifiers[typ]
	if n == nil {
		n = &notifier{q: q, typ: typ, subs: make(map[*Subscription]struct{}), kick: make(chan struct{}, 1)}
		q.notifiers[typ] = n
		q.wg.Add(1)
		go n.run()
	}
	s := &Subscription{n: n, id: id, begin: begin, ch: make(chan Event), wake: make(chan struct{}, 1), done: make(chan struct{})}
	n.subs[s] = struct{}{}
	q.wg.Add(1)
	go func() { defer q.wg.Done(); s.pump(q.closed) }()
	n.poke()
	return s, st, data, nil
}

// notifier delivers the transition log of one type to its subscriptions:
// it watches the type's watermark key and reads the log forward from the
// oldest position any subscription still needs.
type notifier struct {
	q    *Queue
	typ  string
	subs map[*Subscription]struct{} // guarded by q.mu
	kick chan struct{}
}

func (n *notifier) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *notifier) remove(s *Subscription) {
	n.q.mu.Lock()
	delete(n.subs, s)
	n.q.mu.Unlock()
	n.poke()
}

type logEntry struct {
	key []byte
	id  string
	st  State
}

func (n *notifier) run() {
	q := n.q
	defer q.wg.Done()
	ctx, cancel := context.WithCancel(q.ctx) // ends its pending watch on return
	defer cancel()
	for {
		watch, err := q.store.Watch(ctx, q.l.watermark(n.typ))
		if err != nil {
			return
		}
		q.mu.Lock()
		if len(n.subs) == 0 {
			delete(q.notifiers, n.typ)
			q.mu.Unlock()
			return
		}
		subs := make([]*Subscription, 0, len(n.subs))
		var from []byte
		for s := range n.subs {
			subs = append(subs, s)
			if from == nil || bytes.Compare(s.begin, from) < 0 {
				from = s.begin
			}
		}
		q.mu.Unlock()
		if err := n.deliver(ctx, subs, from); err != nil && ctx.Err() == nil {
			q.log.Warn("notifier read failed", "type", n.typ, "error", err)
		}
		select {
		case <-watch:
		case <-n.kick:
		case <-ctx.Done():
			return
		}
	}
}

// deliver reads the log from `from` and pushes matching events.
func (n *notifier) deliver(ctx context.Context, subs []*Subscription, from []byte) error {
	q := n.q
	end := kv.PrefixEnd(q.l.logType(n.typ))
	wanted := make(map[string]bool, len(subs))
	for _, s := range subs {
		wanted[s.id] = true
	}
	for {
		var entries []logEntry
		data := map[string][]byte{}
		err := q.store.View(ctx, func(t kv.ReadTx) error {
			entries = entries[:0]
			err := t.Range(from, end, kv.RangeOptions{Limit: 1000}, func(k, v []byte) error {
				var id, st string
				var at int64
				if err := decodeTuple(v, &id, &st, &at); err != nil {
					return err
				}
				entries = append(entries, logEntry{key: append([]byte(nil), k...), id: id, st: State(st)})
				return nil
			})
			if err != nil {
				return err
			}
			for _, e := range entries {
				if !wanted[e.id] {
					continue
				}
				if _, ok := data[e.id]; ok {
					continue
				}
				r, err := q.readRow(t, n.typ, e.id)
				if err != nil {
					return err
				}
				if r == nil {
					data[e.id] = nil
					continue
				}
				if data[e.id], err = q.readData(t, n.typ, e.id, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
		for _, e := range entries {
			for _, s := range subs {
				if s.id != e.id || bytes.Compare(e.key, s.begin) < 0 {
					continue
				}
				ev := Event{ID: e.id, State: e.st}
				if e.st != NotFound {
					ev.Data = data[e.id]
				}
				s.push(ev)
			}
		}
		last := entries[len(entries)-1].key
		from = append(append([]byte(nil), last...), 0)
		q.mu.Lock()
		for _, s := range subs {
			if bytes.Compare(s.begin, from) < 0 {
				s.begin = from
			}
		}
		q.mu.Unlock()
		if len(entries) < 1000 {
			return nil
		}
	}
}
