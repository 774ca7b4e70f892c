package jobs

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/internal/repeatlog"
	"github.com/couchepi/couchepi/plugin/kv"
)

// Runner leases: one hold on the queue per runner process, renewed as a
// whole, so the cost of staying alive grows with runners, not with jobs.
// Jobs accepted under a lease (AcceptOptions.Lease) need no heartbeat of
// their own: they are re-enqueued when their lease expires.
//
// # Timing rule: a job never runs on two runners at once
//
// A lease has a TTL. Its holder renews it every LeaseOptions.Renew; a
// renewal that commits proves the lease had not been expired when it
// committed. The holder is valid (Lease.Valid) until TTL/2 has passed
// since the start of its last successful renewal on either of two clocks:
// its monotonic clock, and one that keeps counting while the machine is
// suspended (CLOCK_BOOTTIME on Linux, see uptime), since the monotonic
// clock stops during a suspend and a VM resumed after one would otherwise
// believe its lease still had its remaining time. It checks
// Valid before every write it makes for a job held under the lease. Any
// process running RunMonitors watches every lease's heartbeat and expires
// a lease whose heartbeat it has seen unchanged for a whole TTL of its own
// monotonic clock, counted from the first time it saw that value: after
// the renewal committed, hence after it started. So a lease expires at
// least TTL after the start of its last renewal, when its holder has not
// been valid for TTL/2. A holder paused past that point (GC, SIGSTOP, a
// frozen VM) finds itself invalid when it resumes, before its first write.
// A lease that was once invalid is never renewed again: it is lost, and
// its holder grants itself a new one.

// DefaultLeaseTTL is the TTL of a lease granted with LeaseOptions.TTL 0.
const DefaultLeaseTTL = 10 * time.Second

// haltedBatch is how many halted jobs one renewal reads (and clears); more
// wait for the next renewal.
const haltedBatch = 256

var (
	// ErrLeaseLost: the lease expired (not renewed in time, or expired by
	// another process) or was revoked; its holder must stop writing for
	// every job held under it.
	ErrLeaseLost = errors.New("jobs: lease lost")
	// errLeaseGone is the renewal's view of ErrLeaseLost: the lease's
	// identity is gone or marked expired in the store.
	errLeaseGone = errors.New("jobs: lease expired in the store")
	// ErrNodeInUse: Grant found the node name held by a lease that another
	// live process renews; two processes must not run as one node.
	ErrNodeInUse = errors.New("jobs: node name in use by another live process")
	// errNodeHeld ends a grant transaction that found its node name held.
	errNodeHeld = errors.New("jobs: node name held")
)

// LeaseOptions configure a lease.
type LeaseOptions struct {
	// Node names the runner in LeaseInfo and logs.
	Node string
	// Host and PID identify the process; zero means this process
	// (os.Hostname, os.Getpid).
	Host string
	PID  int
	// TTL is how long the lease lives without renewal; 0 means
	// DefaultLeaseTTL. The holder stops being valid after TTL/2.
	TTL time.Duration
	// Renew is how often the lease is renewed; 0 means TTL/10.
	Renew time.Duration
	// Replaces, when set, is asked at Grant about every other live lease:
	// true means its holder is surely dead (say this node's previous
	// process, killed), so it is expired at once and its jobs re-enqueued,
	// instead of after its TTL.
	Replaces func(LeaseInfo) bool
	// Halted, when set, is called from the renewal goroutine with each
	// job that was taken from the lease's holder (removed, or replaced
	// by a fresh job) since the last renewal: the holder should stop its
	// work on it.
	Halted func(HaltedJob)
	// Format is the newest format of job data the holder runs (its own
	// records' version), published in LeaseInfo.Format: during a rolling
	// upgrade, a runner given a job of a newer format can tell whether a
	// live runner runs it. 0 means unset.
	Format int
}

// HaltedJob is a job taken from its runner (LeaseOptions.Halted).
type HaltedJob struct {
	Type, ID string
	lock     [16]byte
}

// Is reports whether j is the accepted job that was taken (and not a
// later acceptance of the same job).
func (h HaltedJob) Is(j *Job) bool {
	return j != nil && j.Type == h.Type && j.ID == h.ID && j.lock == h.lock
}

// LeaseInfo describes a live lease as the store holds it.
type LeaseInfo struct {
	ID   string
	Node string
	Host string
	PID  int
	TTL  time.Duration
	// Running and Capacity are what the holder last published
	// (Lease.SetLoad): the jobs it runs and how many it may run.
	Running, Capacity int
	// LeaseFormat is the format of the lease record, 0 for a lease
	// granted by a version before lease formats; Format is the job data
	// format its holder runs (LeaseOptions.Format), 0 when unknown.
	LeaseFormat, Format int
}

// Lease is a runner's hold on the queue. It is safe for concurrent use.
type Lease struct {
	q     *Queue
	id    string
	info  LeaseInfo
	opts  LeaseOptions
	ttl   time.Duration
	renew time.Duration

	// base anchors validity on the queue's clock, baseUp on the
	// suspend-counting one (Queue.uptime); until and untilUp are the end
	// of validity in nanoseconds since each: the lease is valid until the
	// first of the two.
	base           time.Time
	baseUp         time.Duration
	until, untilUp atomic.Int64

	running, capacity atomic.Int64
	count             int64 // renewals so far (the renewal goroutine's)
	// published is the load the store's heartbeat holds (the renewal
	// goroutine's): an Exclusive queue writes a renewal only to change it.
	published [2]int64

	lost     chan struct{}
	lostOnce sync.Once
	lostErr  atomic.Pointer[error]

	stop    context.CancelFunc
	stopped chan struct{}

	haltMu sync.Mutex // serializes takeHalts
}

// Grant creates a lease and starts renewing it until it is lost or
// revoked. Leases that opts.Replaces names are expired first.
//
// Node names are unique among live leases: when a live lease already
// holds opts.Node, Grant expires it at once if opts.Replaces names it
// (or it is this queue's own lost lease), else watches its heartbeat for
// up to its TTL: a renewal meanwhile means another live process holds the
// name, and Grant fails with ErrNodeInUse; none means its holder is dead,
// and Grant expires it (as any lease watcher would) and takes the name.
// So it never expires a lease that is still renewed, and may wait up to
// that lease's TTL.
func (q *Queue) Grant(ctx context.Context, opts LeaseOptions) (*Lease, error) {
	if q.isClosed() {
		return nil, ErrClosed
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultLeaseTTL
	}
	if opts.Renew <= 0 {
		opts.Renew = opts.TTL / 10
	}
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	if opts.PID == 0 {
		opts.PID = os.Getpid()
	}
	raw := newLock()
	l := &Lease{
		q:       q,
		id:      hex.EncodeToString(raw[:]),
		opts:    opts,
		ttl:     opts.TTL,
		renew:   opts.Renew,
		lost:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	l.info = LeaseInfo{ID: l.id, Node: opts.Node, Host: opts.Host, PID: opts.PID, TTL: opts.TTL, LeaseFormat: LeaseFormat, Format: opts.Format}
	for {
		l.base, l.baseUp = q.opts.Now(), q.uptime()
		var holder LeaseInfo
		err := q.store.Update(ctx, func(t kv.Tx) error {
			holder = LeaseInfo{}
			if opts.Node != "" {
				// Read in the transaction: two processes granting under
				// one name at once conflict, and one sees the other.
				h, err := q.nodeHolder(t, opts.Node)
				if err != nil {
					return err
				}
				if h != nil {
					holder = *h
					return errNodeHeld
				}
			}
			t.Set(q.l.lease(l.id), encodeLease(l.info, false))
			t.Set(q.l.heartbeat(l.id), l.heartbeatValue(0))
			t.Set(q.l.leaseVersion(l.id), encodeLeaseVersion(opts.Format))
			return nil
		})
		if errors.Is(err, errNodeHeld) {
			if err := q.freeNode(ctx, l, holder); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	l.until.Store(int64(l.ttl / 2))
	l.untilUp.Store(int64(l.ttl / 2))
	q.own.Store(l.id, l)
	if opts.Replaces != nil {
		if err := q.expireReplaced(ctx, l); err != nil {
			q.log.Warn("could not expire the leases this one replaces; they expire after their TTL", "error", err)
		}
	}
	rctx, cancel := context.WithCancel(q.ctx)
	l.stop = cancel
	q.mu.Lock()
	if q.isClosed() {
		// Close has begun and may be waiting already: no goroutine of
		// the queue may start now. The lease expires after its TTL.
		q.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	q.wg.Add(1)
	q.mu.Unlock()
	go func() {
		defer q.wg.Done()
		defer close(l.stopped)
		l.run(rctx)
	}()
	q.log.Debug("lease granted", "lease", l.id, "node", opts.Node, "ttl", l.ttl.String())
	return l, nil
}

// ID returns the lease's id.
func (l *Lease) ID() string { return l.id }

// TTL returns the lease's TTL.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Valid returns nil while the holder surely holds the lease, ErrLeaseLost
// once it may not: check it before every write for a job held under it.
func (l *Lease) Valid() error {
	select {
	case <-l.lost:
		return ErrLeaseLost
	default:
	}
	if now, up := l.elapsed(); now >= time.Duration(l.until.Load()) || up >= time.Duration(l.untilUp.Load()) {
		// Lost for good, even if a renewal in flight commits after this:
		// whoever saw the lease invalid may have stopped half way, and a
		// lease valid again would leave its jobs held with nobody on them.
		l.lose(ErrLeaseLost, "not renewed within half its TTL")
		return ErrLeaseLost
	}
	return nil
}

// Strained reports whether the lease's renewals are late: a quarter of
// its TTL has passed since the start of the last one that committed (at
// half, it is lost). The store is slow to commit; a holder should add no
// load it can put off, so that the renewals get through before the lease
// and every job under it are lost (its acceptors stop taking jobs). A
// lease past its deadline is not strained but lost: Strained declares it
// so (as Valid does), for callers that put off their writes while it is
// strained, and so would not learn it otherwise (a renewal stuck on an
// unreachable store does not).
func (l *Lease) Strained() bool {
	if l.Valid() != nil {
		return false
	}
	now, up := l.elapsed()
	return time.Duration(l.until.Load())-now < l.ttl/4 || time.Duration(l.untilUp.Load())-up < l.ttl/4
}

// elapsed is the time since the lease was granted on the queue's clock
// (monotonic unless a test sets Options.Now) and on the suspend-counting
// clock, which also counts a pause of the whole machine.
func (l *Lease) elapsed() (now, up time.Duration) {
	return l.q.opts.Now().Sub(l.base), l.q.uptime() - l.baseUp
}

// Done is closed when the lease is lost or revoked.
func (l *Lease) Done() <-chan struct{} { return l.lost }

// Err returns why the lease was lost, nil while it is held.
func (l *Lease) Err() error {
	if p := l.lostErr.Load(); p != nil {
		return *p
	}
	return nil
}

// SetLoad publishes, with the next renewal, how many jobs the holder runs
// and how many it may run (LeaseInfo.Running, Capacity).
func (l *Lease) SetLoad(running, capacity int) {
	l.running.Store(int64(running))
	l.capacity.Store(int64(capacity))
}

// Revoke stops renewing the lease, re-enqueues the jobs still held under
// it and removes it from the store. Its holder must have stopped writing
// for them. A lost lease may be revoked too, to re-enqueue its jobs at
// once instead of after its TTL.
func (l *Lease) Revoke(ctx context.Context) error {
	l.lose(ErrLeaseLost, "revoked")
	l.stop()
	<-l.stopped
	_, err := l.q.expireLease(ctx, l.id, nil, "revoked by its holder")
	if err == nil {
		l.q.own.Delete(l.id)
	}
	return err
}

// HandOver stops renewing the lease and marks it expired in the store,
// leaving the jobs held under it as they stand, and wakes the acceptors of
// types: other runners take them many per transaction (AcceptMany, Adopt)
// without their being re-enqueued one batch after another first, which
// conflicted with those very accepts. A lease watcher re-enqueues what is
// left after the lease's TTL (watchLeases). Its holder must have stopped
// writing for them. An Exclusive queue has nobody to hand them to: it
// revokes the lease.
func (l *Lease) HandOver(ctx context.Context, types ...string) error {
	if l.q.opts.Exclusive {
		return l.Revoke(ctx)
	}
	l.lose(ErrLeaseLost, "revoked")
	l.stop()
	<-l.stopped
	err := l.q.Transact(ctx, func(tx *Tx) error {
		v, err := tx.t.Get(l.q.l.lease(l.id))
		if err != nil || v == nil {
			return err
		}
		if i, expired, err := decodeLease(l.id, v); err == nil && !expired {
			tx.t.Set(l.q.l.lease(l.id), encodeLease(i, true))
		}
		for _, typ := range types {
			tx.wake(typ)
		}
		return nil
	})
	if err == nil {
		l.q.own.Delete(l.id)
	}
	return err
}

// lose marks the lease lost, once.
func (l *Lease) lose(err error, why string) {
	l.lostOnce.Do(func() {
		l.lostErr.Store(&err)
		close(l.lost)
		if why != "revoked" {
			l.q.log.Warn("lease on the job queue lost; its jobs must stop", "lease", l.id, "node", l.opts.Node, "reason", why)
		}
	})
}

// run renews the lease every l.renew until it is lost or ctx ends, and at
// once when a job is taken from it (its halt signal changes), so that the
// holder stops that job's run within a commit or two (hold.go).
func (l *Lease) run(ctx context.Context) {
	l.q.wg.Add(1) // run's own count keeps Close waiting meanwhile
	go func() {
		defer l.q.wg.Done()
		l.watchDeadline(ctx)
	}()
	t := time.NewTicker(l.renew)
	defer t.Stop()
	failing := repeatlog.Failures{Every: 10 * time.Second}
	signal := l.watchHalts(ctx)
	if signal != nil {
		l.takeHalts(ctx) // taken before the watch was set
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.lost:
			return
		case <-l.q.closed:
			return
		case <-t.C:
		case <-signal:
			signal = l.watchHalts(ctx)
			if err := l.takeHalts(ctx); err != nil {
				l.q.log.Debug("reading the jobs taken from the lease failed; the next renewal reads them", "lease", l.id, "error", err)
			}
			continue
		}
		if signal == nil {
			signal = l.watchHalts(ctx) // a watch that could not be set retries at each renewal
		}
		err := l.renewOnce(ctx)
		switch {
		case err == nil:
			if n, lasted := failing.Recover(l.q.opts.Now()); n > 0 {
				l.q.log.Info("lease renewed again", "lease", l.id, "failures", n, "lasted", lasted.Round(time.Millisecond).String())
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrLeaseLost):
			return
		default:
			if log, n, lasted := failing.Fail(l.q.opts.Now()); log {
				l.q.log.Warn("lease renewal failed; retrying", "lease", l.id, "failures", n, "lasted", lasted.Round(time.Millisecond).String(), "error", err)
			}
		}
	}
}

// watchHalts returns a channel closed when the lease's halt signal
// changes, or nil when the watch cannot be set (the renewal ticker still
// reads the halted jobs).
func (l *Lease) watchHalts(ctx context.Context) <-chan struct{} {
	if l.opts.Halted == nil {
		return nil
	}
	ch, err := l.q.store.Watch(ctx, l.q.l.haltSignal(l.id))
	if err != nil {
		return nil
	}
	return ch
}

// watchDeadline declares the lease lost once its deadline has passed,
// looking every renewal period as a renewal does: a renewal stuck on a
// store that does not answer (a partition) would otherwise leave it held,
// and its jobs running, with no one to call Valid. Holders that put
// their writes off while the lease is strained learn it so too.
func (l *Lease) watchDeadline(ctx context.Context) {
	t := time.NewTicker(l.renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.lost:
			return
		case <-l.q.closed:
			return
		case <-t.C:
			if l.Valid() != nil {
				return
			}
		}
	}
}

// renewOnce renews the lease once and hands the halted jobs it read to
// opts.Halted, then clears them: a halted key is gone only once its holder
// was told (Queue.WaitHalted). A lease no longer valid, or gone from the
// store, is lost.
func (l *Lease) renewOnce(ctx context.Context) error {
	if err := l.Valid(); err != nil {
		l.lose(err, "not renewed within half its TTL")
		return err
	}
	start, startUp := l.elapsed()
	next := l.count + 1
	halted := false // jobs were taken from the lease: takeHalts reads them
	rctx, cancel := context.WithTimeout(ctx, l.ttl/4)
	defer cancel()
	load := [2]int64{l.running.Load(), l.capacity.Load()}
	if l.q.opts.Exclusive && load == l.published {
		// No other process watches the heartbeat: a renewal only has
		// to find the lease still there and nothing halted, a read.
		quiet := false
		err := l.q.store.View(rctx, func(t kv.ReadTx) error {
			h, err := l.liveHalted(t)
			quiet = !h
			return err
		})
		if err == nil && quiet {
			return l.renewed(ctx, start, startUp, next, false)
		}
	}
	err := l.q.store.Update(rctx, func(t kv.Tx) error {
		h, err := l.liveHalted(t)
		if err != nil {
			return err
		}
		halted = h
		t.Set(l.q.l.heartbeat(l.id), pack(nil, next, load[0], load[1]))
		return nil
	})
	if errors.Is(err, errLeaseGone) {
		l.lose(ErrLeaseLost, "expired by another process")
		return ErrLeaseLost
	}
	if err != nil {
		if verr := l.Valid(); verr != nil {
			l.lose(verr, "not renewed within half its TTL")
			return verr
		}
		return err
	}
	l.published = load
	return l.renewed(ctx, start, startUp, next, halted)
}

// liveHalted is a renewal's look in t: errLeaseGone when the lease is
// gone, expired or undecodable, else whether jobs were taken from it.
func (l *Lease) liveHalted(t kv.ReadTx) (halted bool, err error) {
	v, err := t.Get(l.q.l.lease(l.id))
	if err != nil {
		return false, err
	}
	if _, expired, err := decodeLease(l.id, v); v == nil || err != nil || expired {
		return false, errLeaseGone
	}
	k, err := firstKey(t.Range, l.q.l.halted(l.id))
	return k != nil, err
}

// renewed records a renewal that started at start (startUp on the
// suspend-counting clock) and, when it saw jobs taken from the lease,
// hands them on (takeHalts).
func (l *Lease) renewed(ctx context.Context, start, startUp time.Duration, count int64, halted bool) error {
	l.count = count
	if err := l.Valid(); err != nil {
		return err // the deadline passed while the renewal was in flight
	}
	if until := int64(start + l.ttl/2); until > l.until.Load() {
		l.until.Store(until)
	}
	if until := int64(startUp + l.ttl/2); until > l.untilUp.Load() {
		l.untilUp.Store(until)
	}
	if !halted {
		return nil
	}
	return l.takeHalts(ctx)
}

// takeHalts reads the jobs taken from the lease, hands them to
// opts.Halted, then clears their halted keys, unless a job was taken again
// since (a later lock): a halted key is gone only once its holder was
// told (Queue.WaitHalted). Calls are serialized, so a job is told once.
func (l *Lease) takeHalts(ctx context.Context) error {
	l.haltMu.Lock()
	defer l.haltMu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, l.ttl/4)
	defer cancel()
	var halted []HaltedJob
	begin := l.q.l.halted(l.id)
	err := l.q.store.View(cctx, func(t kv.ReadTx) error {
		halted = halted[:0]
		return t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{Limit: haltedBatch}, func(k, v []byte) error {
			var h HaltedJob
			if err := decodeKey(begin, k, &h.Type, &h.ID); err != nil || len(v) != 16 {
				return errBadKey
			}
			copy(h.lock[:], v)
			halted = append(halted, h)
			return nil
		})
	})
	if err != nil || len(halted) == 0 {
		return err
	}
	if l.opts.Halted != nil {
		for _, h := range halted {
			l.opts.Halted(h)
		}
	}
	return l.q.store.Update(cctx, func(t kv.Tx) error {
		for _, h := range halted {
			k := l.q.l.haltedJob(l.id, h.Type, h.ID)
			v, err := t.Get(k)
			if err != nil {
				return err
			}
			if bytes.Equal(v, h.lock[:]) {
				t.Clear(k)
			}
		}
		return nil
	})
}

// Held returns the ids of the jobs of type typ held under the lease, as
// the store has them.
func (l *Lease) Held(ctx context.Context, typ string) ([]string, error) {
	var ids []string
	begin := l.q.l.leaseJobs(l.id)
	err := l.q.store.View(ctx, func(t kv.ReadTx) error {
		ids = ids[:0]
		return t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{KeysOnly: true}, func(k, _ []byte) error {
			var ktyp, id string
			if err := decodeKey(begin, k, &ktyp, &id); err != nil {
				return err
			}
			if ktyp == typ {
				ids = append(ids, id)
			}
			return nil
		})
	})
	return ids, err
}

// Release re-enqueues job typ/id if it is held under the lease, for a
// holder that no longer runs it (its runner ended without settling it, say
// its Resubmit failed): while the lease lives, nothing else would. It
// reports whether the job was released.
func (l *Lease) Release(ctx context.Context, typ, id string) (bool, error) {
	released := false
	err := l.q.Transact(ctx, func(tx *Tx) error {
		released = false
		h, err := tx.t.Get(l.q.l.holder(typ, id))
		if err != nil || string(h) != l.id {
			return err
		}
		tx.unhold(l.id, typ, id)
		r, err := l.q.readRow(tx.t, typ, id)
		if err != nil || r == nil || r.state != rowRunning {
			return err
		}
		if err := tx.enqueue(typ, id, r, r.stime, nil); err != nil {
			return err
		}
		tx.writeRow(typ, id, r)
		released = true
		return nil
	})
	return released, err
}

func (l *Lease) heartbeatValue(count int64) []byte {
	return pack(nil, count, l.running.Load(), l.capacity.Load())
}

// encodeLease is a lease identity's value.
func encodeLease(info LeaseInfo, expired bool) []byte {
	state := int64(0)
	if expired {
		state = 1
	}
	return pack(nil, info.Node, info.Host, int64(info.PID), info.TTL.Milliseconds(), state)
}

func decodeLease(id string, v []byte) (LeaseInfo, bool, error) {
	var node, host string
	var pid, ttl, state int64
	if err := decodeTupleHead(v, &node, &host, &pid, &ttl, &state); err != nil {
		return LeaseInfo{}, false, err
	}
	return LeaseInfo{ID: id, Node: node, Host: host, PID: int(pid), TTL: time.Duration(ttl) * time.Millisecond}, state != 0, nil
}

// decodeHeartbeat reads the load a heartbeat publishes into info.
func decodeHeartbeat(v []byte, info *LeaseInfo) {
	var count, running, capacity int64
	if decodeTupleHead(v, &count, &running, &capacity) == nil {
		info.Running, info.Capacity = int(running), int(capacity)
	}
}

// leaseRow is a lease as read from the store.
type leaseRow struct {
	info      LeaseInfo
	expired   bool
	heartbeat []byte
}

// readLeases reads every lease with its heartbeat.
func (q *Queue) readLeases(ctx context.Context) (map[string]*leaseRow, error) {
	rows := map[string]*leaseRow{}
	err := q.store.View(ctx, func(t kv.ReadTx) error {
		clear(rows)
		begin := q.l.leases()
		err := t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
			var id string
			if err := decodeKey(begin, k, &id); err != nil {
				return err
			}
			info, expired, err := decodeLease(id, v)
			if err != nil {
				q.log.Warn("undecodable lease; ignored", "lease", id)
				return nil
			}
			rows[id] = &leaseRow{info: info, expired: expired}
			return nil
		})
		if err != nil {
			return err
		}
		begin = q.l.leaseVersions()
		err = t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
			var id string
			if err := decodeKey(begin, k, &id); err != nil {
				return err
			}
			if r := rows[id]; r != nil {
				decodeLeaseVersion(v, &r.info)
			}
			return nil
		})
		if err != nil {
			return err
		}
		begin = q.l.heartbeats()
		return t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
			var id string
			if err := decodeKey(begin, k, &id); err != nil {
				return err
			}
			if r := rows[id]; r != nil {
				r.heartbeat = append([]byte(nil), v...)
				decodeHeartbeat(v, &r.info)
			}
			return nil
		})
	})
	return rows, err
}

// expireReplaced expires at once the leases l's options say it replaces.
func (q *Queue) expireReplaced(ctx context.Context, l *Lease) error {
	rows, err := q.readLeases(ctx)
	if err != nil {
		return err
	}
	for id, r := range rows {
		if id == l.id || r.expired || !l.opts.Replaces(r.info) {
			continue
		}
		if _, err := q.expireLease(ctx, id, nil, "replaced by a new process of its node"); err != nil {
			return err
		}
	}
	return nil
}

// leaseSeen is what a lease watcher last saw of one lease's heartbeat,
// and since when (the watcher's clock).
type leaseSeen struct {
	heartbeat []byte
	since     time.Time
	expired   bool // seen marked expired since then
}

// watchLeases is one look at every lease (RunMonitors, every tick, in
// every process): it expires the leases whose heartbeat it has seen
// unchanged for their TTL, finishes the expiry of leases marked expired,
// and records the live ones for Leases.
func (q *Queue) watchLeases(ctx context.Context, seen map[string]*leaseSeen) error {
	rows, err := q.readLeases(ctx)
	if err != nil {
		return err
	}
	now := q.opts.Now()
	live := make([]LeaseInfo, 0, len(rows))
	for id := range seen {
		if rows[id] == nil {
			delete(seen, id)
		}
	}
	q.own.Range(func(id, _ any) bool {
		if rows[id.(string)] == nil {
			q.own.Delete(id) // expired and gone
		}
		return true
	})
	var firstErr error
	for id, r := range rows {
		s := seen[id]
		if r.expired {
			// Its jobs are left a TTL to be adopted as they stand (a
			// clean stop hands them over so: Lease.HandOver) before they
			// are re-enqueued, which would conflict with those accepts.
			if s == nil || !s.expired {
				seen[id] = &leaseSeen{since: now, expired: true}
				continue
			}
			if now.Sub(s.since) < r.info.TTL {
				continue
			}
			if _, err := q.expireLease(ctx, id, nil, "expiry resumed"); err != nil && firstErr == nil {
				firstErr = err
			}
			continue
		}
		if l, mine := q.own.Load(id); mine && q.opts.Exclusive && l.(*Lease).Err() == nil {
			// Renewed in memory (Options.Exclusive), not in the store:
			// alive while this queue holds it.
			delete(seen, id)
			live = append(live, r.info)
			continue
		}
		if s == nil || !bytes.Equal(s.heartbeat, r.heartbeat) {
			seen[id] = &leaseSeen{heartbeat: r.heartbeat, since: now}
		} else if now.Sub(s.since) >= r.info.TTL {
			why := "not renewed for " + now.Sub(s.since).Round(time.Millisecond).String()
			done, err := q.expireLease(ctx, id, r.heartbeat, why)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if done || err != nil {
				continue
			}
		}
		live = append(live, r.info)
	}
	q.liveLeases.Store(&live)
	return firstErr
}

// Leases returns the live leases as this process's RunMonitors last saw
// them (nil before its first look).
func (q *Queue) Leases() []LeaseInfo {
	if p := q.liveLeases.Load(); p != nil {
		return *p
	}
	return nil
}

// expireLease expires lease id and re-enqueues the jobs held under it.
// With heartbeat set, it does so only if the lease's heartbeat still is
// heartbeat (a renewal since proves the holder alive: it reports false).
func (q *Queue) expireLease(ctx context.Context, id string, heartbeat []byte, why string) (bool, error) {
	var info LeaseInfo
	gone := false
	err := q.store.Update(ctx, func(t kv.Tx) error {
		gone = false
		if heartbeat != nil {
			hb, err := t.Get(q.l.heartbeat(id))
			if err != nil {
				return err
			}
			if !bytes.Equal(hb, heartbeat) {
				return errStop
			}
		}
		v, err := t.Get(q.l.lease(id))
		if err != nil {
			return err
		}
		if v == nil {
			gone = true
			return nil
		}
		i, expired, err := decodeLease(id, v)
		if err != nil {
			i = LeaseInfo{ID: id}
		}
		info = i
		if !expired {
			t.Set(q.l.lease(id), expiredValue(id, v))
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return false, nil
	}
	if err != nil || gone {
		return gone, err
	}
	n, err := q.releaseLeaseJobs(ctx, id)
	if n > 0 || why != "revoked by its holder" {
		q.log.Info("lease expired; its jobs were re-enqueued", "lease", id, "node", info.Node, "host", info.Host, "pid", info.PID, "jobs", n, "reason", why)
	}
	return true, err
}

// releaseBatch is how many jobs of an expired lease one transaction
// re-enqueues. Small, so that a transaction reads few enough keys to
// compare each one (on etcd, more are merged into covering ranges that
// conflict with the accepts of the very jobs released before) and writes
// little enough to offer several versionstamps: a node whose acceptors
// start the released jobs as they come commits all the while.
const releaseBatch = 16

// releaseLeaseJobs re-enqueues the running jobs held under an expired
// lease, a batch per transaction, then removes the lease.
func (q *Queue) releaseLeaseJobs(ctx context.Context, id string) (int, error) {
	total := 0
	begin := q.l.leaseJobs(id)
	for {
		n, more := 0, false
		err := q.Transact(ctx, func(tx *Tx) error {
			n, more = 0, false
			type held struct {
				key     []byte
				typ, id string
			}
			var found []held
			// A snapshot scan, as reenqueueStale's: what the transaction
			// depends on is each job's holder and row, read below.
			scan := tx.t.Range
			if snap, ok := tx.t.(kv.SnapshotTx); ok {
				scan = snap.SnapshotRange
			}
			err := scan(begin, kv.PrefixEnd(begin), kv.RangeOptions{Limit: releaseBatch, KeysOnly: true}, func(k, _ []byte) error {
				h := held{key: append([]byte(nil), k...)}
				if err := decodeKey(begin, k, &h.typ, &h.id); err != nil {
					return err
				}
				found = append(found, h)
				return nil
			})
			if err != nil {
				return err
			}
			if pre, ok := tx.t.(kv.PrefetchTx); ok && len(found) > 0 {
				keys := make([][]byte, 0, 2*len(found))
				for _, h := range found {
					keys = append(keys, q.l.holder(h.typ, h.id), q.l.job(h.typ, h.id))
				}
				if err := pre.Prefetch(keys...); err != nil {
					return err
				}
			}
			for _, h := range found {
				tx.t.Clear(h.key)
				hv, err := tx.t.Get(q.l.holder(h.typ, h.id))
				if err != nil {
					return err
				}
				if string(hv) != id {
					continue // released, or held under another lease since
				}
				tx.t.Clear(q.l.holder(h.typ, h.id))
				r, err := q.readRow(tx.t, h.typ, h.id)
				if err != nil {
					return err
				}
				if r == nil || r.state != rowRunning {
					continue
				}
				if err := tx.enqueue(h.typ, h.id, r, r.stime, nil); err != nil {
					return err
				}
				tx.writeRow(h.typ, h.id, r)
				n++
			}
			if len(found) == releaseBatch {
				more = true
				return nil
			}
			tx.t.Clear(q.l.lease(id))
			tx.t.Clear(q.l.heartbeat(id))
			tx.t.Clear(q.l.leaseVersion(id))
			hb := q.l.halted(id)
			tx.t.ClearRange(hb, kv.PrefixEnd(hb))
			tx.t.Clear(q.l.haltSignal(id))
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if !more {
			return total, nil
		}
	}
}
