package replicate

import (
	"sync"
	"time"
)

// workerIdle is how long a document worker waits for a batch before it
// ends; the next batch starts another.
const workerIdle = 10 * time.Second

// workerPool runs a replication's batches on up to max goroutines. A
// worker starts when a batch finds none idle and ends after workerIdle
// without one: a continuous job mostly has nothing to write, and when
// thousands run (most of them quiet, see Slot), worker_processes idle
// goroutines each, with the stacks they grew writing, cost memory and the
// garbage collector's time scanning them.
//
// Only the batcher offers batches and closes the pool, so workers start
// only while it runs: members counts it until close and every running
// worker, and done is closed when none is left (a channel, not a
// WaitGroup, so that the run waits on it without a goroutine of its own).
type workerPool struct {
	max     int
	idle    time.Duration // how long a worker waits for a batch
	in      chan *batch
	process func(*batch) bool // false: the worker ends (the run failed)
	exited  chan struct{}     // a worker ended idle: a full pool may have room

	mu      sync.Mutex
	running int
	members int
	done    chan struct{}
}

func newWorkerPool(max int, idle time.Duration, process func(*batch) bool) *workerPool {
	return &workerPool{max: max, idle: idle, in: make(chan *batch), process: process, exited: make(chan struct{}, 1),
		members: 1, // the batcher, until close
		done:    make(chan struct{})}
}

// offer hands b to an idle worker, or to a new one while fewer than max
// run; false when every worker is busy.
func (p *workerPool) offer(b *batch) bool {
	select {
	case p.in <- b:
		return true
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running >= p.max {
		return false
	}
	p.running++
	p.members++
	go p.work(b)
	return true
}

func (p *workerPool) work(b *batch) {
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		if !p.process(b) {
			p.leave()
			return
		}
		idle.Reset(p.idle)
		select {
		case next, ok := <-p.in:
			if !ok {
				p.leave()
				return
			}
			b = next
		case <-idle.C:
			p.leave()
			select {
			case p.exited <- struct{}{}:
			default:
			}
			return
		}
	}
}

// leave ends a worker.
func (p *workerPool) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running--
	p.dropLocked()
}

// dropLocked counts one member less, closing done after the last.
func (p *workerPool) dropLocked() {
	if p.members--; p.members == 0 {
		close(p.done)
	}
}

// close ends the workers once they are idle; the batcher calls it last.
func (p *workerPool) close() {
	close(p.in)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked()
}

// wait returns once the batcher closed the pool and every worker ended.
func (p *workerPool) wait() { <-p.done }
