package kv

import (
	"bytes"
	"context"
	"sync"
)

// watchRegistry fires per-key watches of the embedded backends on commit.
type watchRegistry struct {
	mu      sync.Mutex
	closed  bool
	watches map[string]map[*watch]struct{}
	wg      sync.WaitGroup // the watches' goroutines, which close waits for
}

type watch struct {
	ch   chan struct{}
	once sync.Once
}

func (w *watch) fire() { w.once.Do(func() { close(w.ch) }) }

func newWatchRegistry() *watchRegistry {
	return &watchRegistry{watches: make(map[string]map[*watch]struct{})}
}

// add registers a watch on key that fires on the next commit writing key, or
// when ctx is done.
func (r *watchRegistry) add(ctx context.Context, key []byte) (<-chan struct{}, error) {
	w := &watch{ch: make(chan struct{})}
	k := string(key)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	set := r.watches[k]
	if set == nil {
		set = make(map[*watch]struct{})
		r.watches[k] = set
	}
	set[w] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		select {
		case <-ctx.Done():
			r.remove(k, w)
			w.fire()
		case <-w.ch:
		}
	}()
	return w.ch, nil
}

func (r *watchRegistry) remove(k string, w *watch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if set := r.watches[k]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(r.watches, k)
		}
	}
}

// writeSet records which keys a transaction wrote, for firing watches.
type writeSet struct {
	keys   map[string]struct{}
	ranges [][2][]byte
}

func (s *writeSet) key(k []byte) {
	if s.keys == nil {
		s.keys = make(map[string]struct{})
	}
	s.keys[string(k)] = struct{}{}
}

func (s *writeSet) clearRange(begin, end []byte) {
	s.ranges = append(s.ranges, [2][]byte{append([]byte(nil), begin...), append([]byte(nil), end...)})
}

// fire fires every watch on a key in ws.
func (r *watchRegistry) fire(ws *writeSet) {
	if len(ws.keys) == 0 && len(ws.ranges) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.watches) == 0 {
		return
	}
	for k, set := range r.watches {
		_, hit := ws.keys[k]
		if !hit {
			for _, rg := range ws.ranges {
				if bytes.Compare([]byte(k), rg[0]) >= 0 && bytes.Compare([]byte(k), rg[1]) < 0 {
					hit = true
					break
				}
			}
		}
		if hit {
			for w := range set {
				w.fire()
			}
			delete(r.watches, k)
		}
	}
}

// close fires all watches, refuses new ones, and returns once their
// goroutines have ended.
func (r *watchRegistry) close() {
	r.mu.Lock()
	r.closed = true
	for k, set := range r.watches {
		for w := range set {
			w.fire()
		}
		delete(r.watches, k)
	}
	r.mu.Unlock()
	r.wg.Wait()
}
