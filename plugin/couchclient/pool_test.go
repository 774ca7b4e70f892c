package couchclient

import "testing"

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
