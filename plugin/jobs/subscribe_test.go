package jobs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

func nextEvent(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case ev, ok := <-s.Events():
		if !ok {
			t.Fatal("events channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return Event{}
}

func TestSubscribeSeesEveryTransition(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		if _, _, _, err := q.Subscribe(ctx, typ, "j"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("subscribe missing: %v", err)
		}
		mustAdd(t, q, "j", "d0", time.Time{})
		mustAdd(t, q, "other", "x", time.Now().Add(time.Hour))
		sub, st, data, err := q.Subscribe(ctx, typ, "j")
		if err != nil || st != Pending || string(data) != "d0" {
			t.Fatalf("subscribe: %v %q %v", st, data, err)
		}
		defer sub.Close()

		// Transitions made back to back, faster than any notifier can poll:
		// the transition log must still deliver each one.
		j := mustAccept(t, q)
		if err := q.Update(ctx, j, []byte("d1")); err != nil {
			t.Fatal(err)
		}
		if err := q.Remove(ctx, typ, "other"); err != nil {
			t.Fatal(err)
		}
		if err := q.Finish(ctx, j, []byte("d2")); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, q, "j", "d3", time.Time{})
		if err := q.Remove(ctx, typ, "j"); err != nil {
			t.Fatal(err)
		}
		want := []State{Running, Running, Finished, Pending, NotFound}
		var got []State
		for range want {
			got = append(got, nextEvent(t, sub).State)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("events: got %v, want %v", got, want)
		}
		select {
		case ev := <-sub.Events():
			t.Fatalf("unexpected extra event %+v", ev)
		case <-time.After(100 * time.Millisecond):
		}
	})
}

func TestSubscribeData(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		mustAdd(t, q, "j", "d0", time.Time{})
		sub1, _, _, err := q.Subscribe(ctx, typ, "j")
		if err != nil {
			t.Fatal(err)
		}
		j := mustAccept(t, q)
		if ev := nextEvent(t, sub1); ev.State != Running || ev.ID != "j" || string(ev.Data) != "d0" {
			t.Fatalf("event %+v", ev)
		}
		// a second subscriber joining later sees only later transitions
		sub2, st, _, err := q.Subscribe(ctx, typ, "j")
		if err != nil || st != Running {
			t.Fatalf("subscribe running: %v %v", st, err)
		}
		if err := q.Finish(ctx, j, []byte("result")); err != nil {
			t.Fatal(err)
		}
		for _, sub := range []*Subscription{sub1, sub2} {
			if ev := nextEvent(t, sub); ev.State != Finished || string(ev.Data) != "result" {
				t.Fatalf("event %+v", ev)
			}
		}
		sub1.Close()
		sub2.Close()
		if _, ok := <-sub1.Events(); ok {
			t.Fatal("events channel open after Close")
		}
	})
}
