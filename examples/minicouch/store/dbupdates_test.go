package store

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestDBUpdates: the feed holds each database's newest event in the
// order they happened, survives a reopen, and wakes waiters.
func TestDBUpdates(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	feed := func(since uint64) []string {
		var out []string
		if err := s.DBUpdates(since, 0, func(u DBUpdate) error { out = append(out, u.DBName+":"+u.Type); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, _ := s.CreateDB("a")
	s.CreateDB("b")
	if got := feed(0); !slices.Equal(got, []string{"a:created", "b:created"}) {
		t.Fatalf("after creates: %v", got)
	}
	mark := s.DBUpdatesSeq()
	if _, err := a.Put(ctx, &Doc{ID: "x", Body: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	if got := feed(0); !slices.Equal(got, []string{"b:created", "a:updated"}) {
		t.Fatalf("after a write: %v", got)
	}
	if got := feed(mark); !slices.Equal(got, []string{"a:updated"}) {
		t.Fatalf("since the creates: %v", got)
	}
	// A waiter wakes on the next event. Its start is read before the
	// event: a waiter that reaches WaitDBUpdates only after the delete
	// (a loaded machine) returns at once instead of waiting for another
	// event; the pause only makes the wake path the usual one.
	done := make(chan uint64)
	since := s.DBUpdatesSeq()
	go func() {
		seq, _ := s.WaitDBUpdates(ctx, since)
		done <- seq
	}()
	time.Sleep(20 * time.Millisecond)
	if err := s.DeleteDB("b"); err != nil {
		t.Fatal(err)
	}
	select {
	case seq := <-done:
		if seq != s.DBUpdatesSeq() {
			t.Errorf("woke at %d, feed at %d", seq, s.DBUpdatesSeq())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not wake")
	}
	s.Close()
	s, err = Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := feed(0); !slices.Equal(got, []string{"a:updated", "b:deleted"}) {
		t.Fatalf("after reopen: %v", got)
	}
}
