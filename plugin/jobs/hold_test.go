package jobs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// haltLog records the jobs a lease's holder was told to stop.
type haltLog struct {
	mu   sync.Mutex
	jobs []HaltedJob
	hold chan struct{} // when set, Halted blocks until it is closed
}

func (h *haltLog) halted(j HaltedJob) {
	if h.hold != nil {
		<-h.hold
	}
	h.mu.Lock()
	h.jobs = append(h.jobs, j)
	h.mu.Unlock()
}

func (h *haltLog) told(j *Job) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.jobs {
		if x.Is(j) {
			return true
		}
	}
	return false
}

func hold(t *testing.T, q *Queue, id string, notBefore time.Time) Halt {
	t.Helper()
	var h Halt
	err := q.Transact(context.Background(), func(tx *Tx) error {
		var err error
		h, err = tx.Hold(typ, id, notBefore)
		return err
	})
	if err != nil {
		t.Fatalf("hold %s: %v", id, err)
	}
	return h
}

// TestHoldTellsTheHolderAtOnce: a job held (or removed) while running under
// a lease is reported to the lease's holder by the halt signal, not by its
// next renewal (the renewal ticker here never fires), and WaitHalted
// returns only once the holder was told.
func TestHoldTellsTheHolderAtOnce(t *testing.T) {
	for _, how := range []string{"hold", "remove"} {
		t.Run(how, func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				q := newQueue(t, s, Options{})
				log := &haltLog{}
				l := grantManual(t, q, LeaseOptions{Node: "n1", Halted: log.halted})
				mustAdd(t, q, "a", "A", time.Time{})
				mustAdd(t, q, "b", "B", time.Time{})
				ja, jb := acceptUnder(t, q, l), acceptUnder(t, q, l)
				var h Halt
				switch how {
				case "hold":
					h = hold(t, q, ja.ID, time.Now().Add(time.Hour))
					if !h.Held() {
						t.Fatal("a job running under a lease: no halt to wait for")
					}
				case "remove":
					if err := q.Remove(context.Background(), typ, ja.ID); err != nil {
						t.Fatal(err)
					}
					h = Halt{lease: l.id, typ: typ, id: ja.ID, at: time.Now()}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := q.WaitHalted(ctx, h); err != nil {
					t.Fatalf("wait halted: %v", err)
				}
				if !log.told(ja) {
					t.Fatal("WaitHalted returned before the holder was told")
				}
				if log.told(jb) {
					t.Fatal("the other job was halted too")
				}
				if err := q.Update(context.Background(), ja, nil); !errors.Is(err, ErrHalt) {
					t.Fatalf("update of a taken job: %v", err)
				}
				if err := q.Update(context.Background(), jb, nil); err != nil {
					t.Fatalf("the other job: %v", err)
				}
				if how == "hold" {
					wantState(t, q, ja.ID, Pending)
					wantData(t, q, ja.ID, string(ja.Data))
				}
			})
		})
	}
}

// TestHoldPending: a pending job is delayed to notBefore, never brought
// forward (a parked job keeps its far time); a finished one is untouched;
// an unknown one is ErrNotFound.
func TestHoldPending(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		now := clock.Now()
		mustAdd(t, q, "soon", "S", time.Time{})
		mustAdd(t, q, "parked", "P", now.Add(24*time.Hour))
		mustAdd(t, q, "done", "D", time.Time{})
		// Accept whichever comes first until "done" is taken, then finish it.
		for {
			j := mustAccept(t, q)
			if j.ID == "done" {
				if err := q.Finish(context.Background(), j, nil); err != nil {
					t.Fatal(err)
				}
				break
			}
			if err := q.Resubmit(context.Background(), j, time.Time{}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"soon", "parked", "done"} {
			if h := hold(t, q, id, now.Add(time.Minute)); h.Held() {
				t.Fatalf("%s: a halt for a job that does not run", id)
			}
		}
		wantState(t, q, "done", Finished)
		// Nothing is due before the hold ends.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("accepted %v (%v) while held", j, err)
		}
		clock.advance(time.Minute)
		if j := mustAccept(t, q); j.ID != "soon" {
			t.Fatalf("accepted %s after the hold, want soon", j.ID)
		}
		err := q.Transact(context.Background(), func(tx *Tx) error {
			_, err := tx.Hold(typ, "nope", now)
			return err
		})
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("hold of an unknown job: %v", err)
		}
	})
}

// TestWaitHaltedBounded: a holder that does not take the halt in (here its
// Halted blocks) is waited for at most half its lease's TTL: by then it
// is no longer valid unless it renewed, and a renewal reads the halt.
func TestWaitHaltedBounded(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		log := &haltLog{hold: make(chan struct{})}
		defer close(log.hold)
		l := grantManual(t, q, LeaseOptions{Node: "n1", TTL: 400 * time.Millisecond, Halted: log.halted})
		mustAdd(t, q, "a", "A", time.Time{})
		ja := acceptUnder(t, q, l)
		h := hold(t, q, ja.ID, time.Now().Add(time.Hour))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := q.WaitHalted(ctx, h); err != nil {
			t.Fatalf("wait halted: %v", err)
		}
		if log.told(ja) {
			t.Fatal("the blocked holder was told")
		}
	})
}

// TestWaitHaltedLeaseGone: once the lease is revoked there is nobody to
// wait for.
func TestWaitHaltedLeaseGone(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		log := &haltLog{hold: make(chan struct{})}
		l := grantManual(t, q, LeaseOptions{Node: "n1", Halted: log.halted})
		mustAdd(t, q, "a", "A", time.Time{})
		ja := acceptUnder(t, q, l)
		h := hold(t, q, ja.ID, time.Now().Add(time.Hour))
		done := make(chan error, 1)
		go func() { done <- q.WaitHalted(context.Background(), h) }()
		close(log.hold) // let the renewal goroutine go, then revoke
		if err := l.Revoke(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("wait halted: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("WaitHalted still waits for a revoked lease")
		}
	})
}
