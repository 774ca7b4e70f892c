package store

import (
	"context"
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// writer is the store's group commit: one goroutine takes every write
// request queued while the previous commit was running and applies them in
// one bbolt transaction (one fsync). A request's function must return an
// error only before it has changed anything, or for I/O failures; when the
// shared transaction fails, each request is retried in a transaction of its
// own so one bad request cannot fail the others.
type writer struct {
	s        *Store
	max      int
	reqs     chan *writeReq
	done     chan struct{} // closed by stop
	finished chan struct{} // closed when loop returns
	stopOnce sync.Once

	mu     sync.RWMutex // held for reading while queueing; stop takes it to close
	closed bool
}

type writeReq struct {
	fn    func(tx *bolt.Tx) error
	after func() // run after a successful commit, before the caller is released
	err   chan error
}

var errClosed = errors.New("store: closed")

func startWriter(s *Store, max int) *writer {
	w := &writer{s: s, max: max, reqs: make(chan *writeReq, max), done: make(chan struct{}), finished: make(chan struct{})}
	go w.loop()
	return w
}

// do queues fn and waits for its commit.
func (w *writer) do(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	return w.doAfter(ctx, fn, nil)
}

// doAfter queues fn; after is called once the commit is durable.
func (w *writer) doAfter(ctx context.Context, fn func(tx *bolt.Tx) error, after func()) error {
	r := &writeReq{fn: fn, after: after, err: make(chan error, 1)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return errClosed
	}
	select {
	case w.reqs <- r:
		w.mu.RUnlock()
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	// Once queued, the write may commit: wait for the outcome regardless of
	// ctx so the caller never reports failure for a durable write.
	return <-r.err
}

func (w *writer) stop() {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.done)
	})
	<-w.finished
}

func (w *writer) loop() {
	defer close(w.finished)
	batch := make([]*writeReq, 0, w.max)
	for {
		batch = batch[:0]
		select {
		case r := <-w.reqs:
			batch = append(batch, r)
		case <-w.done:
			// drain whatever is queued, then exit
			for {
				select {
				case r := <-w.reqs:
					w.commit([]*writeReq{r})
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < w.max {
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		w.commit(batch)
	}
}

func (w *writer) commit(batch []*writeReq) {
	err := w.s.update(func(tx *bolt.Tx) error {
		for _, r := range batch {
			if err := r.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		for _, r := range batch {
			if r.after != nil {
				r.after()
			}
			r.err <- nil
		}
		return
	}
	if len(batch) == 1 {
		batch[0].err <- err
		return
	}
	for _, r := range batch {
		w.commit([]*writeReq{r})
	}
}
