package couchclient

import (
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time   { return c.t }
func (c *fakeClock) advance(ms int64) { c.t = c.t.Add(time.Duration(ms) * time.Millisecond) }
func newFakeClock() *fakeClock        { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func TestRateLimiterVectors(t *testing.T) {
	type step struct {
		after   int64 // ms since previous step
		failure bool
		want    int64
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"new key is zero", nil},
		{"one failure", []step{{0, true, 24}}},
		{"two failures 100ms apart", []step{{0, true, 24}, {100, true, 29}}},
		{"back to back failures", []step{{0, true, 24}, {0, true, 24}}},
		{"failure then success then success", []step{{0, true, 24}, {100, false, 20}, {100, false, 0}}},
		{"success on unknown key", []step{{0, false, 0}}},
		{"success inside window ignored", []step{{0, true, 24}, {50, false, 24}}},
		{"decay after quiet period", []step{
			{0, true, 24}, {100, true, 29}, {100, true, 35}, {100, true, 42}, {100, true, 50},
			{100, true, 60}, {100, true, 72}, {100, true, 86}, {100, true, 103}, {100, true, 124},
			{100, true, 149}, {100, false, 109}, {1100, false, 0},
		}},
		{"capped at max", []step{{0, true, 24}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			rl := NewRateLimiter(clk.now)
			key := RateKey{"http://h/db/", "GET"}
			if got := rl.Interval(key); len(tc.steps) == 0 && got != 0 {
				t.Fatalf("new key interval = %d, want 0", got)
			}
			for i, s := range tc.steps {
				clk.advance(s.after)
				var got int64
				if s.failure {
					got = rl.Failure(key)
				} else {
					got = rl.Success(key)
				}
				if got != s.want {
					t.Fatalf("step %d: got %d want %d", i, got, s.want)
				}
				if iv := rl.Interval(key); iv != s.want {
					t.Fatalf("step %d: Interval %d want %d", i, iv, s.want)
				}
			}
		})
	}
}

func TestRateLimiterAdditiveFactors(t *testing.T) {
	cases := []struct{ in, want int64 }{
		{100, 20}, {101, 40}, {1000, 40}, {1001, 100}, {10000, 100}, {10001, 1000},
	}
	for _, c := range cases {
		if got := additiveFactor(c.in); got != c.want {
			t.Errorf("additiveFactor(%d) = %d want %d", c.in, got, c.want)
		}
	}
}

func TestRateLimiterMaxAndPurge(t *testing.T) {
	clk := newFakeClock()
	rl := NewRateLimiter(clk.now)
	key := RateKey{"http://h/db/", "POST"}
	var got int64
	for i := 0; i < 100; i++ {
		clk.advance(100)
		got = rl.Failure(key)
	}
	if got != MaxInterval {
		t.Fatalf("after many failures interval %d want %d", got, MaxInterval)
	}
	clk.advance(60_000)
	if iv := rl.Interval(key); iv != 0 {
		t.Fatalf("stale entry not purged: %d", iv)
	}
}
