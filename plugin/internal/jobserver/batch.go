package jobserver

import (
	"context"
	"errors"
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
	ctx     context.Context // bounds the op run alone, with timeout
	timeout time.Duration
	fn      func(*jobs.Tx) error
	// job and keys are what fn reads of the store (the running job it
	// updates, more keys of tx.KV()): a batch reads those of all its ops
	// in one request (jobs.Tx.PrefetchHeld) before running them.
	job  *jobs.Job
	keys [][]byte
	done chan error // nil: committed; errRunAlone: run it alone
}

// errRunAlone tells a caller its op is to be run in a transaction of its
// own: the batch it was in failed.
var errRunAlone = errors.New("jobserver: batch failed; run alone")

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
// fn reads job (nil if none) and keys, which are read at once with those
// of the batch. Run alone, its transaction is bounded by ctx and timeout
// (the batcher's when 0), counted from then, not from the call: a batch
// may have taken most of it. It is always bounded, as a loop may run it:
// the writes waiting meanwhile must not wait on it for ever.
func (b *batcher) do(ctx context.Context, timeout time.Duration, job *jobs.Job, keys [][]byte, fn func(*jobs.Tx) error, kept func()) error {
	op := &batchOp{ctx: ctx, timeout: timeout, fn: fn, job: job, keys: keys, done: make(chan error, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, op)
	if b.running < batchLoops {
		b.running++
		go b.loop()
	}
	b.mu.Unlock()
	err := <-op.done
	if errors.Is(err, errRunAlone) {
		err = b.alone(op)
	}
	if err != nil {
		return err
	}
	kept()
	return nil
}

// alone runs op in a transaction of its own.
func (b *batcher) alone(op *batchOp) error {
	timeout := op.timeout
	if timeout <= 0 {
		timeout = b.timeout()
	}
	ctx, cancel := context.WithTimeout(op.ctx, timeout)
	defer cancel()
	return b.q.Transact(ctx, func(tx *jobs.Tx) error {
		if err := prefetch(tx, []*batchOp{op}); err != nil {
			return err
		}
		return op.fn(tx)
	})
}

// prefetch reads what ops read, in one request where the store can.
func prefetch(tx *jobs.Tx, ops []*batchOp) error {
	var js []*jobs.Job
	var keys [][]byte
	for _, op := range ops {
		if op.job != nil {
			js = append(js, op.job)
		}
		keys = append(keys, op.keys...)
	}
	return tx.PrefetchHeld(js, keys...)
}

// loop commits the waiting callers' writes, up to batchOps a transaction,
// until none wait. A caller alone has its transaction run by the loop
// too: the callers that come meanwhile then wait, and the loop's next
// transaction takes them together (were it handed back, every loop would
// be idle again at once and each write would go alone).
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
			ops[0].done <- b.alone(ops[0])
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout())
		err := b.q.Transact(ctx, func(tx *jobs.Tx) error {
			if err := prefetch(tx, ops); err != nil {
				return err
			}
			for _, op := range ops {
				if err := op.fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
		for _, op := range ops {
			if err != nil {
				op.done <- errRunAlone
			} else {
				op.done <- nil
			}
		}
	}
}
