package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// AcceptOptions bounds which pending jobs Accept may take.
type AcceptOptions struct {
	// MaxSchedTime: only jobs scheduled at or before it are taken. Zero
	// means "now", re-evaluated while waiting, so Accept wakes when a job
	// scheduled in the future becomes due.
	MaxSchedTime time.Time
	// NoSchedule: only jobs added with a zero stime are considered, and one
	// is picked near a random id instead of scanning the queue (job ids must
	// look random, like replication job ids).
	NoSchedule bool
	// NoWait: return ErrNotFound at once instead of blocking.
	NoWait bool
	// Choose, when set, picks the job to accept instead of chance: it is
	// given the due candidates (with Options.Tag, the earliest due job of
	// each tag, up to 1024 tags; otherwise, or when no tagged job is due,
	// up to 1024 due jobs in stime order) and returns the index of the one
	// to take (an index out of range takes the first). It runs inside the
	// accept transaction, which may be retried, and may be asked again
	// within one attempt (its pick taken meanwhile by another acceptor),
	// so it must be quick and must not use the queue. Ignored with
	// NoSchedule.
	Choose func(candidates []Candidate) int
	// ChooseMany is AcceptMany's Choose: asked once for each pending job
	// it takes, with the due candidates left (with Options.Tag, a tag's
	// next due job replaces the one taken) and those the attempt took
	// already, so that a fair share can count them, it returns the index
	// of the next one to take (out of range: the first). Choose's rules
	// hold: quick, no use of the queue, asked again when the transaction
	// is retried (taken then starts empty again).
	ChooseMany func(candidates, taken []Candidate) int
	// Lease, when set, holds the accepted job under this lease instead of
	// by activity: the job needs no Update to stay the caller's, and is
	// re-enqueued when the lease expires. Accept fails with ErrLeaseLost
	// once the lease is no longer valid.
	Lease *Lease
}

// pickBatch is how many due pending jobs Accept reads to pick one at random.
const pickBatch = 1024

// Accept takes one due pending job of type typ, marks it running with a new
// lock and returns it. Among up to 1024 due jobs it picks one at random (not
// strict FIFO), so concurrent acceptors rarely collide, unless
// opt.Choose picks. When none is due it
// blocks until one is, woken by a watch on the type's pending counter (and a
// timer for the next scheduled job), or until ctx ends (ctx.Err()).
func (q *Queue) Accept(ctx context.Context, typ string, opt AcceptOptions) (*Job, error) {
	var job *Job
	err := q.waitDue(ctx, typ, opt, func(tx *Tx, maxS int64) (bool, int64, error) {
		var next int64
		var err error
		job, next, err = tx.accept(typ, maxS, opt)
		return job != nil, next, err
	})
	return job, err
}

// waitDue runs try in a transaction until it finds what it looks for
// (Accept's and AcceptMany's loop): when nothing is due it waits for an
// enqueue (the type's counter, watched before looking, so an enqueue
// between the look and the wait is not missed), the earliest pending job's
// time (next, -1 when none), ctx or the queue's close. With opt.NoWait it
// returns ErrNotFound at once.
func (q *Queue) waitDue(ctx context.Context, typ string, opt AcceptOptions, try func(tx *Tx, maxS int64) (found bool, next int64, err error)) error {
	for {
		select {
		case <-q.closed:
			return ErrClosed
		default:
		}
		wctx, cancel := context.WithCancel(ctx)
		var watch <-chan struct{}
		if !opt.NoWait {
			var err error
			if watch, err = q.store.Watch(wctx, q.l.counter(typ)); err != nil {
				cancel()
				return err
			}
		}
		maxS := ms(opt.MaxSchedTime)
		if opt.MaxSchedTime.IsZero() {
			maxS = q.opts.Now().UnixMilli()
		}
		found := false
		next := int64(-1)
		err := q.Transact(ctx, func(tx *Tx) error {
			var err error
			found, next, err = try(tx, maxS)
			return err
		})
		if err != nil || found || opt.NoWait {
			cancel()
			if err == nil && !found {
				err = ErrNotFound
			}
			return err
		}
		var timer <-chan time.Time
		var t *time.Timer
		// Only a "now"-bounded scheduled accept can be satisfied by time
		// passing; NoSchedule takes stime-0 jobs only, which are always due.
		if next >= 0 && opt.MaxSchedTime.IsZero() && !opt.NoSchedule {
			t = time.NewTimer(max(time.UnixMilli(next).Sub(q.opts.Now()), time.Millisecond))
			timer = t.C
		}
		select {
		case <-watch:
		case <-timer:
		case <-ctx.Done():
			err = ctx.Err()
		case <-q.closed:
			err = ErrClosed
		}
		cancel()
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// accept picks and starts one due job; it returns the job, or nil and the
// stime of the earliest pending job (-1 when none).
func (tx *Tx) accept(typ string, maxS int64, opt AcceptOptions) (*Job, int64, error) {
	l := tx.q.l
	// On FoundationDB, scan without read conflicts and add one only for the
	// picked key, as couch_jobs does, so acceptors do not conflict on the
	// whole queue.
	scan := tx.t.Range
	snap, isSnap := tx.t.(kv.SnapshotTx)
	if isSnap {
		scan = snap.SnapshotRange
	}
	var (
		key    []byte // the picked pending entry
		tagKey []byte // its tag index entry, when picked through the index
	)
	switch {
	case opt.Choose != nil && !opt.NoSchedule:
		var err error
		key, tagKey, err = tx.choose(scan, typ, maxS, opt.Choose)
		if err != nil {
			return nil, -1, err
		}
	case opt.NoSchedule:
		var err error
		if key, err = tx.pickRandom(scan, typ); err != nil {
			return nil, -1, err
		}
	default:
		mode := tx.q.windows.get(typ)
		if mode == windowsUsed {
			var err error
			if key, err = windowPick(scan, func(id string) []byte { return l.pending(typ, 0, id) }); err != nil {
				return nil, -1, err
			}
		}
		if key != nil {
			break
		}
		// Reservoir-sample one key among up to pickBatch due keys, copying
		// only the keys that are (provisionally) chosen.
		seen := 0
		err := scan(l.pendingType(typ), kv.PrefixEnd(l.pendingAt(typ, maxS)), kv.RangeOptions{Limit: pickBatch, KeysOnly: true}, func(k, _ []byte) error {
			seen++
			if seen == 1 || mrand.IntN(seen) == 0 {
				key = append(key[:0], k...)
			}
			return nil
		})
		if err != nil {
			return nil, -1, err
		}
		switch {
		case seen < pickBatch:
			tx.q.windows.set(typ, windowsUnknown)
		case mode == windowsUsed:
			tx.q.windows.set(typ, windowsUseless)
		default:
			tx.q.windows.set(typ, windowsUsed)
		}
	}
	if key == nil {
		next := int64(-1)
		begin := l.pendingType(typ)
		err := tx.t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{Limit: 1}, func(k, _ []byte) error {
			var id string
			return decodeKey(begin, k, &next, &id)
		})
		return nil, next, err
	}
	var stime int64
	var id string
	if err := decodeKey(l.pendingType(typ), key, &stime, &id); err != nil {
		return nil, -1, err
	}
	if pre, ok := tx.t.(kv.PrefetchTx); ok {
		// The pending entry and the job row are read next: one round
		// trip for both.
		if err := pre.Prefetch(key, l.job(typ, id)); err != nil {
			return nil, -1, err
		}
	}
	if isSnap {
		if err := snap.AddReadConflictKey(key); err != nil {
			return nil, -1, err
		}
	}
	if tagKey != nil {
		// Picked through the tag index: the job may have been taken
		// since a cached pick was read (picks.go), or the index entry may
		// be stale (its job removed by a queue that does not tag: drop
		// it). Either way, pick again.
		v, err := tx.t.Get(key)
		if err != nil {
			return nil, -1, err
		}
		if v == nil {
			if tv, err := tx.t.Get(tagKey); err != nil {
				return nil, -1, err
			} else if tv != nil {
				tx.t.Clear(tagKey)
			}
			return tx.accept(typ, maxS, opt)
		}
		tx.t.Clear(tagKey)
	}
	if err := tx.clearPending(typ, stime, id); err != nil {
		return nil, -1, err
	}
	r, err := tx.q.readRow(tx.t, typ, id)
	if err != nil {
		return nil, -1, err
	}
	if r == nil || r.state != rowPending {
		// A stale queue entry (cannot happen through this package's
		// operations); dropping it is the repair. Retry the pick.
		tx.q.log.Warn("dropped stale pending entry", "type", typ, "job_id", id)
		return tx.accept(typ, maxS, opt)
	}
	data, err := tx.q.readData(tx.t, typ, id, r)
	if err != nil {
		return nil, -1, err
	}
	r.state = rowRunning
	r.resubmit = false
	r.lock = newLock()
	if l := opt.Lease; l != nil {
		if l.Valid() != nil {
			return nil, -1, ErrLeaseLost
		}
		if err := tx.leaseAlive(l); err != nil {
			return nil, -1, ErrLeaseLost
		}
		tx.hold(l, typ, id)
		r.seq = kv.Versionstamp{}
		tx.logEvent(typ, id, Running)
	} else {
		tx.heartbeat(typ, id, r)
	}
	tx.writeRow(typ, id, r)
	return &Job{Type: typ, ID: id, Data: data, lock: r.lock, lease: opt.Lease}, -1, nil
}

// scanFunc is a range read: the transaction's, or its snapshot one.
type scanFunc func(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error

// pickRandom returns the stime-0 pending key nearest after a random id (job
// ids look random, so this picks one without scanning); nil when none.
func (tx *Tx) pickRandom(scan scanFunc, typ string) ([]byte, error) {
	l := tx.q.l
	var key []byte
	first := func(k, _ []byte) error {
		key = append([]byte(nil), k...)
		return nil
	}
	end := kv.PrefixEnd(l.pendingAt(typ, 0))
	var rid [16]byte
	rand.Read(rid[:])
	if err := scan(l.pending(typ, 0, hex.EncodeToString(rid[:])), end, kv.RangeOptions{Limit: 1, KeysOnly: true}, first); err != nil || key != nil {
		return key, err
	}
	err := scan(l.pendingAt(typ, 0), end, kv.RangeOptions{Limit: 1, KeysOnly: true}, first)
	return key, err
}
