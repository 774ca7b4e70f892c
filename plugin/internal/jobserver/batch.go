package jobserver

import (
	"context"
	"sync"
	"time"

	"github.com/couchepi/couchepi/plugin/jobs"
)

// Group commits: the writes many workers make at once (marking the jobs an
// accept took as running, each job's record before its final checkpoint
// when the node stops) share queue transactions. Each was one transaction
// a job: on etcd, about 1,000 of them for a node taking over 1,000 jobs,
// each a linearizable read and a commit of its own, which is most of what
// a handover took.
//
// A caller's writes are a function of the transaction (run again if it
// is retried) and what to keep once it committed. A batch commits the
// functions of every caller waiting, up to batchOps; when one of them
// fails (its job no longer this node's, say), the batch writes nothing
// and each function is run again in a transaction of its own, so that
// every caller gets its own outcome and no write depends on another
// job's.

// batchOps bounds the writes one group commit holds: each reads three or
// four keys, and an etcd commit compares at most 64 one by one (kv/etcd);
// past that its reads merge into ranges that conflict with other writers.
const batchOps = 15

// batchOp is one caller's writes.
type batchOp struct {
	fn   func(*jobs.Tx) error
	done chan bool // true: committed in the batch; false: run it alone
}

// batchLoops bounds the batches one node commits at once.
const batchLoops = 4

// batcher runs waiting callers' writes together, up to batchLoops
// batches at a time.
type batcher struct {
	q       *jobs.Queue
	timeout func() time.Duration // bounds a batch's transaction

	mu      sync.Mutex
	queue   []*batchOp
	running int // loops running
}

// do runs fn in a transaction, with the writes of other callers waiting
// at the same time when there are any, and calls kept once it committed.
// Run alone, its transaction is bounded by ctx and, when not 0, timeout
// (counted from then, not from the call: a batch may have taken most of
// it).
func (b *batcher) do(ctx context.Context, timeout time.Duration, fn func(*jobs.Tx) error, kept func()) error {
	op := &batchOp{fn: fn, done: make(chan bool, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, op)
	if b.running < batchLoops {
		b.running++
		go b.loop()
	}
	b.mu.Unlock()
	if <-op.done {
		kept()
		return nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := b.q.Transact(ctx, fn); err != nil {
		return err
	}
	kept()
	return nil
}

// loop commits the waiting callers' writes, up to batchOps a transaction,
// until none wait. A caller alone runs its own.
func (b *batcher) loop() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), batchOps)
		ops := b.queue[:n:n]
		b.queue = b.queue[n:]
		if n == 0 {
			b.running--
		}
		b.mu.Unlock()
		switch n {
		case 0:
			return
		case 1:
			ops[0].done <- false
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout())
		err := b.q.Transact(ctx, func(tx *jobs.Tx) error {
			for _, op := range ops {
				if err := op.fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
		for _, op := range ops {
			op.done <- err == nil
		}
	}
}
