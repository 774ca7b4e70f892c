package couchclient

import (
	"math"
	"sync"
	"time"
)

// Rate limiter constants, CouchDB's couch_replicator_rate_limiter values (milliseconds).
const (
	// BaseInterval is the smallest non-zero interval between requests to one key.
	BaseInterval = 20
	// BackoffFactor multiplies the interval on every 429.
	BackoffFactor = 1.2
	// MaxInterval is the interval at which a request gives up with max_backoff.
	MaxInterval = 25000
	// SensitivityWindow: updates this close to the previous one are ignored.
	SensitivityWindow = 80
	// decayThreshold and decayFactor: after a quiet period longer than the threshold
	// the interval shrinks by factor × elapsed ms.
	decayThreshold = 1000
	decayFactor    = 2
	// entryMaxAge and purgeEvery: idle entries are forgotten.
	entryMaxAge = 25 * time.Second
	purgeEvery  = 50 * time.Second
)

// RateKey identifies what a rate limiter entry limits: one endpoint base URL and one HTTP method.
type RateKey struct {
	URL    string
	Method string
}

type rateEntry struct {
	interval int64     // ms
	stamp    time.Time // last update
}

// RateLimiter is CouchDB's AIMD rate limiter: each 429 multiplies the interval
// between requests to a key by 1.2, successes subtract an additive factor and
// a quiet period decays it, so many replications sharing an overloaded endpoint
// converge on a rate it accepts. It is safe for concurrent use.
type RateLimiter struct {
	mu        sync.Mutex
	now       func() time.Time
	entries   map[RateKey]rateEntry
	lastPurge time.Time
}

// NewRateLimiter returns an empty limiter reading time from now (nil = time.Now).
func NewRateLimiter(now func() time.Time) *RateLimiter {
	if now == nil {
		now = time.Now
	}
	return &RateLimiter{now: now, entries: map[RateKey]rateEntry{}}
}

// Interval returns the current interval (ms) a request to key must wait before it is sent.
func (r *RateLimiter) Interval(key RateKey) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.purgeLocked()
	return r.entries[key].interval
}

// Failure records a 429 for key and returns the new interval.
func (r *RateLimiter) Failure(key RateKey) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	e, ok := r.entries[key]
	if ok && msSince(e.stamp, now) <= SensitivityWindow {
		return e.interval
	}
	i := e.interval
	if i < BaseInterval {
		i = BaseInterval
	}
	i = int64(math.Round(float64(i) * BackoffFactor))
	if i > MaxInterval {
		i = MaxInterval
	}
	r.entries[key] = rateEntry{interval: i, stamp: now}
	return i
}

// Success records a successful (non-429) response for key and returns the new interval.
func (r *RateLimiter) Success(key RateKey) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	e, ok := r.entries[key]
	if !ok {
		return 0
	}
	dt := msSince(e.stamp, now)
	if dt <= SensitivityWindow {
		return e.interval
	}
	i := e.interval
	if dt > decayThreshold {
		i -= decayFactor * dt
		if i < 0 {
			i = 0
		}
	}
	i -= additiveFactor(i)
	switch {
	case i <= 0:
		delete(r.entries, key)
		return 0
	case i <= BaseInterval:
		i = BaseInterval
	}
	r.entries[key] = rateEntry{interval: i, stamp: now}
	return i
}

func additiveFactor(i int64) int64 {
	switch {
	case i > 10000:
		return 1000
	case i > 1000:
		return 100
	case i > 100:
		return 40
	default:
		return 20
	}
}

func (r *RateLimiter) purgeLocked() {
	now := r.now()
	if now.Sub(r.lastPurge) < purgeEvery {
		return
	}
	r.lastPurge = now
	for k, e := range r.entries {
		if now.Sub(e.stamp) > entryMaxAge {
			delete(r.entries, k)
		}
	}
}

func msSince(t, now time.Time) int64 { return now.Sub(t).Milliseconds() }
