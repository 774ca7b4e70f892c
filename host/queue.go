package host

import (
	"sync"
	"time"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
)

// dbUpdated is the wire name of hooks.DBUpdated.
const dbUpdated = string(hooks.DBUpdated)

// eventQueue is one plugin's bounded queue of after_* events: a FIFO per db
// (so per-db order holds) and a FIFO of dbs with events. A db_updated event
// replaces a db_updated event at the tail of its db's FIFO. When it is full, or
// the plugin is down, a db's queued events are dropped and the db is marked
// for CatchUp instead: nothing is lost silently. While a db waits for its
// CatchUp, its new events are dropped too (the CatchUp reads them), so
// none is delivered ahead of the CatchUp, which would move the plugin's
// position in the db past the changes the CatchUp has yet to read.
type eventQueue struct {
	mu       sync.Mutex
	capacity int
	n        int
	dbs      map[string][]*pb.Event
	order    []string // dbs with events, oldest first
	catchUp  map[string]bool
	catchFIF []string
	// catchAt holds the dbs whose catch-up failed: not tried again
	// before the time given.
	catchAt map[string]time.Time
	down    bool
	dropped uint64
	pushed  uint64
}

func newEventQueue(capacity int) *eventQueue {
	return &eventQueue{capacity: capacity, dbs: map[string][]*pb.Event{}, catchUp: map[string]bool{}, catchAt: map[string]time.Time{}}
}

// push queues ev; it never blocks.
func (q *eventQueue) push(ev *pb.Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	db := ev.GetDb()
	q.pushed++
	if q.down || q.n >= q.capacity || q.catchUp[db] {
		q.dropped++
		q.markCatchUpLocked(db)
		return
	}
	evs, ok := q.dbs[db]
	if n := len(evs); n > 0 && ev.GetHook() == dbUpdated && evs[n-1].GetHook() == dbUpdated {
		// The newer db_updated says all the older one said.
		evs[n-1] = ev
		return
	}
	if !ok || len(evs) == 0 {
		q.order = append(q.order, db)
	}
	q.dbs[db] = append(evs, ev)
	q.n++
}

// markCatchUpLocked drops db's queued events and asks for a CatchUp.
func (q *eventQueue) markCatchUpLocked(db string) {
	if evs := q.dbs[db]; len(evs) > 0 {
		q.n -= len(evs)
		q.dropped += uint64(len(evs))
		delete(q.dbs, db)
		for i, d := range q.order {
			if d == db {
				q.order = append(q.order[:i], q.order[i+1:]...)
				break
			}
		}
	}
	if !q.catchUp[db] {
		q.catchUp[db] = true
		q.catchFIF = append(q.catchFIF, db)
	}
}

// markCatchUp asks for a CatchUp of db (dropping its queued events).
func (q *eventQueue) markCatchUp(db string) {
	q.mu.Lock()
	q.markCatchUpLocked(db)
	q.mu.Unlock()
}

// setDown records whether the plugin can take events.
func (q *eventQueue) setDown(down bool) {
	q.mu.Lock()
	q.down = down
	q.mu.Unlock()
}

// deferCatchUp asks for a CatchUp of db, not to be taken before at (its
// last one failed).
func (q *eventQueue) deferCatchUp(db string, at time.Time) {
	q.mu.Lock()
	q.markCatchUpLocked(db)
	q.catchAt[db] = at
	q.mu.Unlock()
}

// takeCatchUps removes and returns the dbs waiting for a CatchUp, but for
// those put off past now.
func (q *eventQueue) takeCatchUps(now time.Time) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var dbs, later []string
	for _, db := range q.catchFIF {
		if at, ok := q.catchAt[db]; ok && now.Before(at) {
			later = append(later, db)
			continue
		}
		delete(q.catchAt, db)
		delete(q.catchUp, db)
		dbs = append(dbs, db)
	}
	q.catchFIF = later
	return dbs
}

// take removes up to max events, whole db runs in order, oldest db first.
func (q *eventQueue) take(max int) []*pb.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []*pb.Event
	for len(q.order) > 0 && len(batch) < max {
		db := q.order[0]
		evs := q.dbs[db]
		k := min(len(evs), max-len(batch))
		batch = append(batch, evs[:k]...)
		q.n -= k
		if k == len(evs) {
			delete(q.dbs, db)
			q.order = q.order[1:]
		} else {
			q.dbs[db] = evs[k:]
			// Rotate the db to the back so busy dbs do not starve others.
			q.order = append(q.order[1:], db)
		}
	}
	return batch
}

// unshift puts an unacknowledged batch back in front, keeping per-db order.
// A db marked for CatchUp meanwhile does not need its events back.
func (q *eventQueue) unshift(batch []*pb.Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	per := map[string][]*pb.Event{}
	var dbs []string
	for _, ev := range batch {
		db := ev.GetDb()
		if q.catchUp[db] {
			continue
		}
		if _, ok := per[db]; !ok {
			dbs = append(dbs, db)
		}
		per[db] = append(per[db], ev)
	}
	var front []string
	for _, db := range dbs {
		rest, had := q.dbs[db]
		q.dbs[db] = append(per[db], rest...)
		q.n += len(per[db])
		if !had || len(rest) == 0 {
			front = append(front, db)
		}
	}
	q.order = append(front, q.order...)
}

// pending reports whether events or catch-ups wait for delivery.
func (q *eventQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n > 0 || len(q.catchFIF) > 0
}

// counts reports the events queued so far, those dropped for a catch-up
// and those waiting now.
func (q *eventQueue) counts() (pushed, dropped uint64, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pushed, q.dropped, q.n
}
