package jobs

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// extraBackend is a further store the tests run on (FoundationDB under the
// fdb build tag); open returns nil when it is not configured.
type extraBackend struct {
	name string
	open func(t *testing.T) kv.Store
}

var extraBackends []extraBackend

// backends runs fn against the memory and the bolt store, and any extra
// backend that is configured.
func backends(t *testing.T, fn func(t *testing.T, s kv.Store)) {
	for _, b := range extraBackends {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t)
			defer s.Close()
			fn(t, s)
		})
	}
	t.Run("memory", func(t *testing.T) {
		s := kv.NewMemory()
		defer s.Close()
		fn(t, s)
	})
	t.Run("bolt", func(t *testing.T) {
		s, err := kv.OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), kv.BoltOptions{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fn(t, s)
	})
}

const typ = "rep_jobs"

// testClock is a queue clock that moves only when a test advances it.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newQueue(t *testing.T, s kv.Store, opts Options) *Queue {
	t.Helper()
	q, err := New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.SetTypeTimeout(context.Background(), typ, time.Minute); err != nil {
		t.Fatal(err)
	}
	return q
}

func mustAdd(t *testing.T, q *Queue, id, data string, stime time.Time) {
	t.Helper()
	if err := q.Add(context.Background(), typ, id, []byte(data), stime); err != nil {
		t.Fatalf("add %s: %v", id, err)
	}
}

func mustAccept(t *testing.T, q *Queue) *Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j, err := q.Accept(ctx, typ, AcceptOptions{})
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return j
}

func wantState(t *testing.T, q *Queue, id string, want State) {
	t.Helper()
	st, err := q.GetState(context.Background(), typ, id)
	if want == NotFound {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("state of %s: got %v %v, want ErrNotFound", id, st, err)
		}
		return
	}
	if err != nil || st != want {
		t.Fatalf("state of %s: got %q %v, want %q", id, st, err, want)
	}
}

func wantData(t *testing.T, q *Queue, id, want string) {
	t.Helper()
	d, err := q.GetData(context.Background(), typ, id)
	if err != nil || string(d) != want {
		t.Fatalf("data of %s: got %q %v, want %q", id, d, err, want)
	}
}

// eventually polls cond (tests of background activity; no timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
