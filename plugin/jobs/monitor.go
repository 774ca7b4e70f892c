package jobs

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"time"

	"github.com/couchepi/couchepi/internal/repeatlog"
	"github.com/couchepi/couchepi/plugin/kv"
)

// monitorType is the activity monitor's memory for one type.
type monitorType struct {
	marks []watermark // recorded every T/4, oldest first
	next  time.Time
}

// watermark is the type's newest update versionstamp as read at a moment:
// a running job whose last update is at or before vs has not been updated
// since at.
type watermark struct {
	at time.Time
	vs kv.Versionstamp
}

// RunMonitors runs the activity monitor for every job type, and watches
// runner leases (see Lease), until ctx ends (call it in its own
// goroutine). Every process sharing the store may run it; any of them
// expires a lease it has seen unrenewed for its TTL. For the activity
// monitor, a lease key in the store (renewed every Options.MonitorTick, expiring
// after Options.MonitorLease) makes exactly one of them act. For each type
// with timeout T, every T/4 (+ up to T/16 jitter) the monitor records the
// type's update watermark and re-enqueues, at their stime, the running jobs
// not updated since a watermark recorded at least T ago: a job is
// re-enqueued after a whole T without an update, and at most T + T/4 +
// Options.MonitorTick after its last one. (Checking only every T against
// the previous check, as couch_jobs does, let a dead runner's jobs wait up
// to 2T.) It also trims the transition log past Options.EventRetention.
func (q *Queue) RunMonitors(ctx context.Context) {
	var id [16]byte
	for i := range id {
		id[i] = byte(rand.IntN(256))
	}
	holder := hex.EncodeToString(id[:])
	types := map[string]*monitorType{}
	seen := map[string]*leaseSeen{}
	var leaseFailures, monitorFailures repeatlog.Failures
	leader := false
	tick := time.NewTicker(q.opts.MonitorTick)
	defer tick.Stop()
	for {
		// Every process watches the runner leases: a dead runner's jobs
		// are re-enqueued by whichever process sees its lease expire
		// first, without waiting for the monitor lease to move.
		if err := q.watchLeases(ctx, seen); err != nil && ctx.Err() == nil {
			if log, n, lasted := leaseFailures.Fail(q.opts.Now()); log {
				q.log.Warn("lease watch failed; retrying", "error", err, "failures", n, "lasted", lasted.Round(time.Millisecond).String())
			}
		} else if err == nil {
			leaseFailures.Recover(q.opts.Now())
		}
		ok, err := true, error(nil)
		if !q.opts.Exclusive {
			// An Exclusive queue's monitor has no rival to take turns with.
			ok, err = q.lease(ctx, holder)
		}
		if err != nil && ctx.Err() == nil {
			if log, n, lasted := monitorFailures.Fail(q.opts.Now()); log {
				q.log.Warn("monitor lease failed; retrying", "error", err, "failures", n, "lasted", lasted.Round(time.Millisecond).String())
			}
		} else if err == nil {
			monitorFailures.Recover(q.opts.Now())
		}
		if ok != leader {
			q.log.Debug("monitor leadership changed", "leader", ok, "holder", holder)
			leader = ok
			types = map[string]*monitorType{}
		}
		if leader {
			if err := q.monitorOnce(ctx, types); err != nil && ctx.Err() == nil {
				if log, n, lasted := monitorFailures.Fail(q.opts.Now()); log {
					q.log.Warn("activity monitor failed; retrying", "error", err, "failures", n, "lasted", lasted.Round(time.Millisecond).String())
				}
			}
		}
		select {
		case <-ctx.Done():
			if !q.opts.Exclusive {
				q.releaseLease(holder)
			}
			return
		case <-q.closed:
			if !q.opts.Exclusive {
				q.releaseLease(holder)
			}
			return
		case <-tick.C:
		}
	}
}

// lease takes or renews the monitor lease; it reports whether holder has it.
func (q *Queue) lease(ctx context.Context, holder string) (bool, error) {
	var ok bool
	err := q.store.Update(ctx, func(t kv.Tx) error {
		ok = false
		now := q.opts.Now().UnixMilli()
		v, err := t.Get(q.l.monitorLease())
		if err != nil {
			return err
		}
		if v != nil {
			if h, until, ok := decodeMonitorLease(v); ok && h != holder && until > now {
				return nil
			}
		}
		t.Set(q.l.monitorLease(), pack(nil, holder, now+q.opts.MonitorLease.Milliseconds()))
		ok = true
		return nil
	})
	return ok, err
}

// decodeMonitorLease reads the monitor lease's holder and expiry (ms).
func decodeMonitorLease(v []byte) (holder string, until int64, ok bool) {
	ok = decodeTuple(v, &holder, &until) == nil
	return holder, until, ok
}

// releaseLease gives the lease up at shutdown so another process takes over
// without waiting for expiry.
func (q *Queue) releaseLease(holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = q.store.Update(ctx, func(t kv.Tx) error {
		v, err := t.Get(q.l.monitorLease())
		if err != nil || v == nil {
			return err
		}
		if h, _, ok := decodeMonitorLease(v); ok && h == holder {
			t.Clear(q.l.monitorLease())
		}
		return nil
	})
}

// monitorOnce runs the due per-type monitors and trims the transition log.
func (q *Queue) monitorOnce(ctx context.Context, types map[string]*monitorType) error {
	timeouts := map[string]time.Duration{}
	begin := q.l.timeouts()
	err := q.store.View(ctx, func(t kv.ReadTx) error {
		return t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
			var typ string
			if err := decodeKey(begin, k, &typ); err != nil {
				return err
			}
			timeouts[typ] = time.Duration(getInt64(v)) * time.Millisecond
			return nil
		})
	})
	if err != nil {
		return err
	}
	for typ := range types {
		if _, ok := timeouts[typ]; !ok {
			delete(types, typ)
		}
	}
	now := q.opts.Now()
	for typ, timeout := range timeouts {
		mt := types[typ]
		if mt == nil {
			mt = &monitorType{next: now}
			types[typ] = mt
		}
		if now.Before(mt.next) {
			continue
		}
		var cur kv.Versionstamp
		err := q.store.View(ctx, func(t kv.ReadTx) error {
			w, err := t.Get(q.l.watermark(typ))
			copy(cur[:], w)
			return err
		})
		if err != nil {
			return err
		}
		mt.marks = append(mt.marks, watermark{at: now, vs: cur})
		// The newest watermark at least a whole timeout old.
		use := -1
		for i, m := range mt.marks {
			if now.Sub(m.at) >= timeout {
				use = i
			}
		}
		if use >= 0 {
			n, err := q.reenqueueStale(ctx, typ, mt.marks[use].vs)
			if err != nil {
				return err
			}
			if n > 0 {
				q.log.Info("re-enqueued running jobs with no update for a whole type timeout", "type", typ, "count", n, "timeout", timeout.String())
			}
			mt.marks = mt.marks[use+1:]
		}
		mt.next = now.Add(timeout / 4)
		if jitter := timeout / 16; jitter > 0 {
			mt.next = mt.next.Add(time.Duration(rand.Int64N(int64(jitter))))
		}
		if err := q.trimLog(ctx, typ); err != nil {
			return err
		}
	}
	return nil
}

// reenqueueStale re-enqueues running jobs of typ whose last update is at or
// before vs, a few per transaction. The activity index is scanned without
// read conflicts (a snapshot range where the store has them): the runners
// of live jobs update theirs all the while, moving their entries out of
// the scanned range, and a conflict on the whole range would retry the
// transaction for ever. What each transaction depends on is the rows of
// the jobs it re-enqueues, read normally.
func (q *Queue) reenqueueStale(ctx context.Context, typ string, vs kv.Versionstamp) (int, error) {
	total := 0
	begin := q.l.activityType(typ)
	end := kv.PrefixEnd(q.l.activityAt(typ, vs))
	for {
		n, more := 0, false
		err := q.Transact(ctx, func(tx *Tx) error {
			n, more = 0, false
			scan := tx.t.Range
			if snap, ok := tx.t.(kv.SnapshotTx); ok {
				scan = snap.SnapshotRange
			}
			type stale struct {
				key []byte
				vs  kv.Versionstamp
				id  string
			}
			var found []stale
			err := scan(begin, end, kv.RangeOptions{Limit: releaseBatch, KeysOnly: true}, func(k, _ []byte) error {
				var at vsElem
				var id string
				if err := decodeKey(begin, k, &at, &id); err != nil {
					return err
				}
				found = append(found, stale{key: append([]byte(nil), k...), vs: kv.Versionstamp(at), id: id})
				return nil
			})
			if err != nil {
				return err
			}
			if pre, ok := tx.t.(kv.PrefetchTx); ok && len(found) > 0 {
				keys := make([][]byte, len(found))
				for i, s := range found {
					keys[i] = q.l.job(typ, s.id)
				}
				if err := pre.Prefetch(keys...); err != nil {
					return err
				}
			}
			for _, s := range found {
				tx.t.Clear(s.key)
				r, err := q.readRow(tx.t, typ, s.id)
				if err != nil {
					return err
				}
				if r == nil || r.state != rowRunning || r.seq != s.vs {
					continue // updated since, or gone: the entry was stale
				}
				if err := tx.enqueue(typ, s.id, r, r.stime, nil); err != nil {
					return err
				}
				tx.writeRow(typ, s.id, r)
				n++
			}
			more = len(found) == releaseBatch
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

// trimLog drops transition-log entries older than Options.EventRetention.
func (q *Queue) trimLog(ctx context.Context, typ string) error {
	cutoff := q.opts.Now().Add(-q.opts.EventRetention).UnixMilli()
	begin := q.l.logType(typ)
	for {
		more := false
		err := q.store.Update(ctx, func(t kv.Tx) error {
			more = false
			var last []byte
			n := 0
			err := t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{Limit: 1000}, func(k, v []byte) error {
				var id, st string
				var at int64
				if err := decodeTuple(v, &id, &st, &at); err != nil {
					return err
				}
				if at >= cutoff {
					return errStop
				}
				last = append(last[:0], k...)
				n++
				return nil
			})
			if err != nil && err != errStop {
				return err
			}
			if last != nil {
				t.ClearRange(begin, append(last, 0))
			}
			more = n == 1000
			return nil
		})
		if err != nil || !more {
			return err
		}
	}
}
