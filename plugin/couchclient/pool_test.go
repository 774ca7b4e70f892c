package couchclient

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestCloseWaitsForIdleLoop: Close returns only once the pool's
// idle-connection loop has returned, so nothing of the pool runs after it.
func TestCloseWaitsForIdleLoop(t *testing.T) {
	for i := 0; i < 20; i++ {
		p := NewPool(PoolOptions{})
		p.Close()
		select {
		case <-p.idleDone:
		default:
			t.Fatalf("round %d: Close returned while closeIdleLoop still runs", i)
		}
		p.Close() // a second Close returns too
	}
}

// TestCloseEndsHolds: Close ends a server's Retry-After hold and stops its
// timer, so no callback of the pool runs after Close (up to 60 s later)
// and a request still waiting on the hold is let go.
func TestCloseEndsHolds(t *testing.T) {
	p := NewPool(PoolOptions{})
	b := p.budgetOf("http://127.0.0.1:1")
	b.mu.Lock()
	b.holdLocked(time.Now(), maxHold, http.StatusServiceUnavailable)
	b.mu.Unlock()
	waited := make(chan error, 1)
	go func() {
		tk, err := b.acquire(context.Background(), true)
		if err == nil {
			tk.done()
		}
		waited <- err
	}()
	waitFor(t, "the request to wait on the hold", func() bool { return p.BudgetState().Waiting == 1 })
	p.Close()
	if n := p.BudgetState().HostsHeld; n != 0 {
		t.Errorf("HostsHeld = %d after Close, want 0", n)
	}
	b.mu.Lock()
	if b.holdTimer.Stop() {
		t.Error("the hold's timer is still scheduled after Close returned")
		b.holdTimer.Reset(0) // let the waiter go now
	}
	b.mu.Unlock()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("the waiting request: %v", err)
		}
	case <-time.After(30 * time.Second): // a bound only
		t.Error("a request waiting on the hold is still waiting 30 s after Close")
		<-waited
	}
}
