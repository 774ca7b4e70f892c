package jobs

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// TestGrantAfterClose: a queue that is closed grants no lease, so no
// renewal goroutine starts after Close (whose wait may be over).
func TestGrantAfterClose(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		q.Close()
		l, err := q.Grant(context.Background(), LeaseOptions{Node: "late", TTL: time.Minute})
		if !errors.Is(err, ErrClosed) {
			if l != nil {
				l.Revoke(context.Background())
			}
			t.Fatalf("Grant after Close: %v, want ErrClosed", err)
		}
	})
}

// stallingStore is a real store whose Updates, once stall is set, hang
// until their context ends, as on a store that stopped answering.
type stallingStore struct {
	kv.Store
	stall   atomic.Bool
	stalled chan struct{} // gets a value when an Update hangs
	// deaf, when set, makes a hung Update ignore its context too (as a
	// commit whose outcome the store keeps resolving), until release.
	deaf    bool
	release chan struct{}
}

func (s *stallingStore) Update(ctx context.Context, fn func(kv.Tx) error) error {
	if s.stall.Load() {
		select {
		case s.stalled <- struct{}{}:
		default:
		}
		if s.deaf {
			<-s.release
			return errors.New("stalled")
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Update(ctx, fn)
}

// TestCloseCancelsRenewal: Close cancels a lease renewal in flight rather
// than waiting for the renewal's own timeout (TTL/4, 15 minutes here).
func TestCloseCancelsRenewal(t *testing.T) {
	mem := kv.NewMemory()
	defer mem.Close()
	s := &stallingStore{Store: mem, stalled: make(chan struct{}, 1)}
	q, err := New(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Grant(context.Background(), LeaseOptions{Node: "n", TTL: time.Hour, Renew: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	s.stall.Store(true)
	<-s.stalled // a renewal is in flight and hangs
	closed := make(chan struct{})
	go func() {
		q.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute): // a bound only: Close returns at once when it works
		t.Fatal("Close still waits for a hung lease renewal after a minute")
	}
}
