package repeatlog

import (
	"testing"
	"time"
)

func TestFailures(t *testing.T) {
	var f Failures
	f.Every = 10 * time.Second
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at      time.Duration
		wantLog bool
		count   int
	}{
		{0, true, 1},
		{time.Second, false, 2},
		{9 * time.Second, false, 3},
		{10 * time.Second, true, 4},
		{15 * time.Second, false, 5},
		{20 * time.Second, true, 6},
	}
	for _, s := range steps {
		log, n, lasted := f.Fail(t0.Add(s.at))
		if log != s.wantLog || n != s.count || lasted != s.at {
			t.Fatalf("at %v: log %v count %d lasted %v, want %v %d %v", s.at, log, n, lasted, s.wantLog, s.count, s.at)
		}
	}
	if n, lasted := f.Recover(t0.Add(25 * time.Second)); n != 6 || lasted != 25*time.Second {
		t.Fatalf("recover: %d %v", n, lasted)
	}
	if n, _ := f.Recover(t0.Add(26 * time.Second)); n != 0 {
		t.Fatalf("second recover: %d", n)
	}
	if log, n, _ := f.Fail(t0.Add(30 * time.Second)); !log || n != 1 {
		t.Fatalf("a new run of failures starts logged: %v %d", log, n)
	}
}
