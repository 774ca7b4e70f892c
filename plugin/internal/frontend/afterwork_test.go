package frontend

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestDeletesStopJobsBounded (issue 32): deleting many replication docs
// stops their jobs' workers at most afterTasks at once, and Close waits
// for the stops under way and drops those not begun, so none runs after
// the plugin stopped.
func TestDeletesStopJobsBounded(t *testing.T) {
	fx := newFixture(t)
	var running, most, done atomic.Int64
	release := make(chan struct{})
	fx.f.cfg.StopJob = func(ctx context.Context, _ string) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		done.Add(1)
		return nil
	}
	const n = 200
	for i := 0; i < n; i++ {
		fx.write("_replicator", fmt.Sprintf("d%03d", i), `{"source":"http://127.0.0.1:5984/a","target":"http://127.0.0.1:5984/b"}`)
	}
	for i := 0; i < n; i++ {
		fx.write("_replicator", fmt.Sprintf("d%03d", i), "") // deleted
	}
	deadline := time.Now().Add(5 * time.Second)
	for running.Load() < afterTasks && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := most.Load(); got != afterTasks {
		t.Fatalf("%d stops at once, want %d", got, afterTasks)
	}
	closed := make(chan struct{})
	go func() { fx.f.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the stops under way")
	}
	if r := running.Load(); r != 0 {
		t.Fatalf("%d stops still running after Close", r)
	}
	if d := done.Load(); d != afterTasks {
		t.Fatalf("%d stops ran, want the %d under way only", d, afterTasks)
	}
	close(release)
}
