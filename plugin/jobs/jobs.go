// Package jobs is a Go port of CouchDB 4.x couch_jobs: typed background jobs
// with opaque data in a queue held in a kv.Store. Jobs are added pending with
// a scheduled time, accepted by runners (which then hold a lock on them),
// kept alive with Update, and released with Finish or Resubmit. An activity
// monitor re-enqueues running jobs whose runner stopped updating for a whole
// type timeout; subscribers see every state transition. The queue keeps no
// per-job state in memory: everything lives in the store, so many processes
// can share one queue (on etcd or FoundationDB). It knows nothing of
// replication: it is public so that any Go program can keep couch_jobs-style
// jobs in a kv.Store.
//
// # Timing rule: a job never runs on two runners at once
//
// A runner holds its jobs either under a lease (Lease, AcceptOptions.Lease:
// one renewal per runner, see lease.go for the rule) or by activity. For a
// job held by activity, let T be the type's activity timeout. The monitor
// re-enqueues a running job only after a whole T without an Update (and at
// most T + T/4 + Options.MonitorTick after its last one). A runner must
// therefore Update at least every T/8, and stop writing for a job whose
// last successful Update is T/2 old (it may have been cut off from the
// store). Either way, a runner that reconnects after its job was
// re-enqueued gets ErrHalt from its next Update, since the lock moved on.
package jobs

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/hashicorp/go-hclog"
)

// State is a job's state.
type State string

// Job states, as couch_jobs names them. NotFound only appears in events, for
// a job that was removed.
const (
	Pending  State = "pending"
	Running  State = "running"
	Finished State = "finished"
	NotFound State = "not_found"
)

var (
	// ErrNotFound: the job (or, for Accept with NoWait, a due job) does not exist.
	ErrNotFound = errors.New("jobs: not_found")
	// ErrHalt: the caller no longer holds the job's lock (the job was
	// removed, re-enqueued by the activity monitor, or accepted by another
	// runner); the runner must stop working on it.
	ErrHalt = errors.New("jobs: halt")
	// ErrNoTypeTimeout: Add for a type whose timeout was never set.
	ErrNoTypeTimeout = errors.New("jobs: no_type_timeout")
	// ErrDataTooLarge: job data is larger than MaxDataSize.
	ErrDataTooLarge = errors.New("jobs: job data too large")
	// ErrClosed: the queue was closed.
	ErrClosed = errors.New("jobs: queue closed")
)

// Job is a job accepted by a runner. Data is the job's data when accepted
// (or as last written by this runner). The unexported lock (and lease, for
// a job accepted under one) proves ownership to Update, Finish and
// Resubmit.
type Job struct {
	Type string
	ID   string
	Data []byte
	// Resubmit is set when the job was re-added while running: Finish will
	// then put it back in the pending queue instead of finishing it.
	Resubmit bool
	lock     [16]byte
	lease    *Lease // the lease it was accepted under, nil if none
}

// Options configures a Queue.
type Options struct {
	// Logger receives the queue's structured logs; nil means no logs.
	Logger hclog.Logger
	// Prefix is prepended to every key the queue writes; other users of the
	// same store must keep out of it.
	Prefix []byte
	// MonitorTick is how often RunMonitors wakes to renew its lease and
	// check types; 0 means 1 s.
	MonitorTick time.Duration
	// MonitorLease is how long a monitor's lease lasts without renewal
	// before another process may take over; 0 means 10 s.
	MonitorLease time.Duration
	// EventRetention is how long transition-log entries are kept for
	// subscribers; 0 means 10 min.
	EventRetention time.Duration
	// Tag, when set, names the group a pending job belongs to (for the
	// replicator: its fair-share key). It is called with the job's data each
	// time the job is enqueued, and the job is then also indexed under its
	// tag, so Accept with AcceptOptions.Choose sees the earliest due job of
	// every tag however many jobs other tags have pending. Every Queue
	// writing the same store should use the same Tag; jobs enqueued without
	// one are still accepted (after the tagged ones) and RebuildTagIndex
	// indexes them.
	Tag func(typ, id string, data []byte) string
	// Exclusive says this Queue is the only user of the store (a bolt
	// file, which one process holds locked): no other process can expire
	// its leases or run its monitors, so leases are renewed in memory and
	// the activity monitor takes no lease, and a queue at rest writes
	// nothing. Leases left in the store by an earlier process still expire
	// after their TTL.
	Exclusive bool
	// Now is the queue's clock (due times, leases, log retention); nil
	// means time.Now. Tests move it instead of sleeping.
	Now func() time.Time
}

// Queue is a couch_jobs queue on a kv.Store. It is safe for concurrent use.
type Queue struct {
	store  kv.Store
	l      layout
	log    hclog.Logger
	opts   Options
	closed chan struct{}
	once   sync.Once
	// ctx is the queue's lifetime: cancelled by Close, it is the parent
	// of the contexts of the queue's own background work.
	ctx    context.Context
	cancel context.CancelFunc

	windows windowModes // per type: pick from windows of the queue?
	picks   pickCache   // window picks of big tagged types not taken yet

	liveLeases atomic.Pointer[[]LeaseInfo] // as RunMonitors last saw them
	// own holds the leases this queue granted and still renews, by id:
	// with Options.Exclusive, their renewals are not written.
	own sync.Map

	// uptime is the clock that bounds lease validity besides opts.Now:
	// one that counts suspended time (uptime_linux.go); tests replace it.
	uptime func() time.Duration

	mu        sync.Mutex
	notifiers map[string]*notifier
	// wg counts the queue's goroutines; Close waits for them. Add to it
	// only under mu, after seeing closed still open.
	wg sync.WaitGroup
}

// New returns a queue on store under opts.Prefix. The store stays owned by
// the caller (Close does not close it).
func New(store kv.Store, opts Options) (*Queue, error) {
	if store == nil {
		return nil, errors.New("jobs: nil store")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.MonitorTick <= 0 {
		opts.MonitorTick = time.Second
	}
	if opts.MonitorLease <= 0 {
		opts.MonitorLease = 10 * time.Second
	}
	if opts.EventRetention <= 0 {
		opts.EventRetention = 10 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	q := &Queue{
		store:     store,
		l:         layout{prefix: append([]byte(nil), opts.Prefix...)},
		log:       opts.Logger.Named("jobs"),
		opts:      opts,
		closed:    make(chan struct{}),
		notifiers: make(map[string]*notifier),
		uptime:    uptime,
	}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	return q, nil
}

// Close stops the queue's subscriptions and notifiers. Blocked Accept calls
// return ErrClosed.
// It returns once every goroutine the queue started has returned.
func (q *Queue) Close() error {
	q.once.Do(func() {
		q.mu.Lock()
		close(q.closed)
		q.cancel()
		q.mu.Unlock()
	})
	q.wg.Wait()
	return nil
}

// isClosed reports whether Close has begun.
func (q *Queue) isClosed() bool {
	select {
	case <-q.closed:
		return true
	default:
		return false
	}
}

// ms converts a scheduled time to the stored form: milliseconds since the
// epoch, 0 for the zero time (run as soon as possible).
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	v := t.UnixMilli()
	if v < 0 {
		return 0
	}
	return v
}

func newLock() [16]byte {
	var l [16]byte
	rand.Read(l[:])
	return l
}

// SetTypeTimeout creates job type typ (or changes it) with activity timeout
// d: a running job not updated for d is re-enqueued by the monitor.
func (q *Queue) SetTypeTimeout(ctx context.Context, typ string, d time.Duration) error {
	if d <= 0 {
		return errors.New("jobs: type timeout must be positive")
	}
	return q.store.Update(ctx, func(t kv.Tx) error {
		t.Set(q.l.timeout(typ), putInt64(d.Milliseconds()))
		return nil
	})
}

// GetTypeTimeout returns typ's activity timeout, ErrNotFound if unset.
func (q *Queue) GetTypeTimeout(ctx context.Context, typ string) (time.Duration, error) {
	var d time.Duration
	err := q.store.View(ctx, func(t kv.ReadTx) error {
		v, err := t.Get(q.l.timeout(typ))
		if err != nil {
			return err
		}
		if v == nil {
			return ErrNoTypeTimeout
		}
		d = time.Duration(getInt64(v)) * time.Millisecond
		return nil
	})
	return d, err
}

// ClearTypeTimeout removes typ's timeout; later Adds fail with ErrNoTypeTimeout.
func (q *Queue) ClearTypeTimeout(ctx context.Context, typ string) error {
	return q.store.Update(ctx, func(t kv.Tx) error {
		t.Clear(q.l.timeout(typ))
		return nil
	})
}

// Add adds job typ/id with data, scheduled at stime (zero = now). See Tx.Add.
func (q *Queue) Add(ctx context.Context, typ, id string, data []byte, stime time.Time) error {
	return q.Transact(ctx, func(tx *Tx) error { return tx.Add(typ, id, data, stime) })
}

// Remove deletes a job in any state. See Tx.Remove.
func (q *Queue) Remove(ctx context.Context, typ, id string) error {
	return q.Transact(ctx, func(tx *Tx) error { return tx.Remove(typ, id) })
}

// Update is a running job's heartbeat, optionally with new data (nil keeps
// the data). See Tx.Update.
func (q *Queue) Update(ctx context.Context, j *Job, data []byte) error {
	return q.Transact(ctx, func(tx *Tx) error { return tx.Update(j, data) })
}

// Finish ends a running job. See Tx.Finish.
func (q *Queue) Finish(ctx context.Context, j *Job, data []byte) error {
	return q.Transact(ctx, func(tx *Tx) error { return tx.Finish(j, data) })
}

// Resubmit re-enqueues a running job at stime and releases it. See Tx.Resubmit.
func (q *Queue) Resubmit(ctx context.Context, j *Job, stime time.Time, data []byte) error {
	return q.Transact(ctx, func(tx *Tx) error { return tx.Resubmit(j, stime, data) })
}

// GetState returns the state of typ/id, ErrNotFound if it does not exist.
func (q *Queue) GetState(ctx context.Context, typ, id string) (State, error) {
	var st State
	err := q.store.View(ctx, func(t kv.ReadTx) error {
		r, err := q.jobRow(t, typ, id)
		if err == nil {
			st = r.State()
		}
		return err
	})
	return st, err
}

// GetData returns the data of typ/id, ErrNotFound if it does not exist.
func (q *Queue) GetData(ctx context.Context, typ, id string) ([]byte, error) {
	var data []byte
	err := q.store.View(ctx, func(t kv.ReadTx) error {
		var err error
		data, err = q.jobData(t, typ, id)
		return err
	})
	return data, err
}
