package kvtest

import (
	"context"
	"sync"

	"github.com/couchepi/couchepi/plugin/kv"
)

// RoundTrips is a kv.Store whose transactions can prefetch (kv.PrefetchTx,
// as etcd's do) and count the reads that would each be a round trip to a
// remote store: every Range, every Prefetch, and every Get of a key
// neither prefetched, read nor written before in the transaction. Tests
// hold a caller to a number of round trips with it, on any store.
type RoundTrips struct {
	kv.Store
	mu    sync.Mutex
	trips int
}

// Update implements kv.Store.
func (s *RoundTrips) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return s.Store.Update(ctx, func(t kv.Tx) error {
		return fn(&roundTripTx{Tx: t, s: s, known: map[string]bool{}})
	})
}

// Count is the number of round trips so far.
func (s *RoundTrips) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trips
}

func (s *RoundTrips) trip() {
	s.mu.Lock()
	s.trips++
	s.mu.Unlock()
}

type roundTripTx struct {
	kv.Tx
	s     *RoundTrips
	known map[string]bool
}

func (t *roundTripTx) Get(key []byte) ([]byte, error) {
	if !t.known[string(key)] {
		t.s.trip()
		t.known[string(key)] = true
	}
	return t.Tx.Get(key)
}

func (t *roundTripTx) Range(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
	t.s.trip()
	return t.Tx.Range(begin, end, opt, fn)
}

func (t *roundTripTx) Set(key, value []byte) {
	t.known[string(key)] = true
	t.Tx.Set(key, value)
}

// Prefetch implements kv.PrefetchTx.
func (t *roundTripTx) Prefetch(keys ...[]byte) error {
	t.s.trip()
	for _, k := range keys {
		t.known[string(k)] = true
	}
	return nil
}
