package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"

	"github.com/couchepi/couchepi/plugin/kv"
)

// MaxAcceptBatch bounds how many jobs one AcceptMany transaction takes: a
// batch depends on two keys a job, and etcd compares at most 64 keys one
// by one (kv/etcd), past which its reads merge into ranges that conflict
// with every other acceptor.
const MaxAcceptBatch = 30

// errTakenNone ends an AcceptMany attempt that found nothing due.
var errTakenNone = errors.New("jobs: nothing due")

// AcceptMany takes up to max (at most MaxAcceptBatch) jobs of type typ in
// one transaction, under opt.Lease, which it requires. It takes first the
// running jobs held under expired leases, as they stand: a job whose
// holder's lease has expired is claimable without being re-enqueued
// first, so the jobs of a dead node move in a few transactions instead
// of two per job. Then due pending jobs, a run of them from a random place
// among the first due ones (so nodes taking jobs at once rarely want the
// same), or those opt.ChooseMany picks. It blocks as Accept does until at
// least one job is there, or returns ErrNotFound at once with opt.NoWait.
// opt.Choose and opt.NoSchedule are not supported (use Accept).
func (q *Queue) AcceptMany(ctx context.Context, typ string, max int, opt AcceptOptions) ([]*Job, error) {
	if opt.Lease == nil {
		return nil, errors.New("jobs: AcceptMany needs a lease")
	}
	if opt.Choose != nil || opt.NoSchedule {
		return nil, errors.New("jobs: AcceptMany takes neither Choose (see ChooseMany) nor NoSchedule")
	}
	max = min(max, MaxAcceptBatch)
	if max <= 0 {
		return nil, nil
	}
	var got []*Job
	err := q.waitDue(ctx, typ, opt, func(tx *Tx, maxS int64) (bool, int64, error) {
		var next int64
		var err error
		got, next, err = tx.acceptMany(typ, maxS, max, opt.Lease, opt.ChooseMany)
		return len(got) > 0, next, err
	})
	return got, err
}

// acceptMany is one AcceptMany attempt: the jobs it took, or none and the
// stime of the earliest pending job (-1 when none).
func (tx *Tx) acceptMany(typ string, maxS int64, max int, l *Lease, choose func(cands, taken []Candidate) int) ([]*Job, int64, error) {
	if l.Valid() != nil {
		return nil, -1, ErrLeaseLost
	}
	if err := tx.leaseAlive(l); err != nil {
		return nil, -1, ErrLeaseLost
	}
	scan := tx.t.Range
	snap, isSnap := tx.t.(kv.SnapshotTx)
	if isSnap {
		scan = snap.SnapshotRange
	}
	got, err := tx.adopt(scan, typ, max, l)
	if err != nil {
		return nil, -1, err
	}
	if len(got) == max {
		return got, -1, nil
	}
	if choose != nil {
		return tx.takeChosen(scan, typ, maxS, max-len(got), l, choose, got)
	}
	// A run of due pending entries from a random place among the first
	// pickBatch (they sort by stime, then by random-looking id).
	var keys [][]byte
	err = scan(tx.q.l.pendingType(typ), kv.PrefixEnd(tx.q.l.pendingAt(typ, maxS)), kv.RangeOptions{Limit: pickBatch, KeysOnly: true}, func(k, _ []byte) error {
		keys = append(keys, append([]byte(nil), k...))
		return nil
	})
	if err != nil {
		return nil, -1, err
	}
	if len(keys) == 0 {
		if len(got) > 0 {
			return got, -1, nil
		}
		next := int64(-1)
		begin := tx.q.l.pendingType(typ)
		err := tx.t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{Limit: 1}, func(k, _ []byte) error {
			var id string
			return decodeKey(begin, k, &next, &id)
		})
		return nil, next, err
	}
	want := min(max-len(got), len(keys))
	from := mrand.IntN(len(keys) - want + 1)
	keys = keys[from : from+want]
	ids := make([]string, len(keys))
	stimes := make([]int64, len(keys))
	if pre, ok := tx.t.(kv.PrefetchTx); ok {
		var fetch [][]byte
		for i, k := range keys {
			if err := decodeKey(tx.q.l.pendingType(typ), k, &stimes[i], &ids[i]); err != nil {
				return nil, -1, err
			}
			fetch = append(fetch, k, tx.q.l.job(typ, ids[i]))
		}
		if err := pre.Prefetch(fetch...); err != nil {
			return nil, -1, err
		}
	} else {
		for i, k := range keys {
			if err := decodeKey(tx.q.l.pendingType(typ), k, &stimes[i], &ids[i]); err != nil {
				return nil, -1, err
			}
		}
	}
	for i, k := range keys {
		if isSnap {
			if err := snap.AddReadConflictKey(k); err != nil {
				return nil, -1, err
			}
		}
		if err := tx.clearPending(typ, stimes[i], ids[i]); err != nil {
			return nil, -1, err
		}
		r, err := tx.q.readRow(tx.t, typ, ids[i])
		if err != nil {
			return nil, -1, err
		}
		if r == nil || r.state != rowPending {
			tx.q.log.Warn("dropped stale pending entry", "type", typ, "job_id", ids[i])
			continue
		}
		j, err := tx.startUnder(l, typ, ids[i], r)
		if err != nil {
			return nil, -1, err
		}
		got = append(got, j)
	}
	return got, -1, nil
}

// takeChosen is acceptMany's pending part with a ChooseMany: it takes up
// to want due pending jobs that choose picks, appended to got; none taken
// and nothing picked returns the stime of the earliest pending job.
func (tx *Tx) takeChosen(scan scanFunc, typ string, maxS int64, want int, l *Lease, choose func(cands, taken []Candidate) int, got []*Job) ([]*Job, int64, error) {
	keys, tagKeys, err := tx.chooseMany(scan, typ, maxS, want, choose)
	if err != nil {
		return nil, -1, err
	}
	for stale := 0; len(keys) > 0 && stale < maxClaims; stale++ {
		taken := len(got)
		if got, err = tx.takeKeys(typ, keys, tagKeys, l, got); err != nil || len(got) > taken {
			return got, -1, err
		}
		// Every pick was stale (taken since a cached pick was read, or
		// an index entry left behind, now cleared): pick again rather
		// than report nothing due while jobs are.
		if keys, tagKeys, err = tx.chooseMany(scan, typ, maxS, want, choose); err != nil {
			return nil, -1, err
		}
	}
	switch {
	case len(keys) > 0:
		return got, maxS, nil // still stale: the caller looks again at once
	case len(got) > 0:
		return got, -1, nil
	}
	next := int64(-1)
	begin := tx.q.l.pendingType(typ)
	err = tx.t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{Limit: 1}, func(k, _ []byte) error {
		var id string
		return decodeKey(begin, k, &next, &id)
	})
	return nil, next, err
}

// takeKeys takes the jobs of the chosen pending keys (their tag index
// entries in tagKeys, nil when not picked through the index), appended
// to got; a stale pick is skipped.
func (tx *Tx) takeKeys(typ string, keys, tagKeys [][]byte, l *Lease, got []*Job) ([]*Job, error) {
	ids := make([]string, len(keys))
	stimes := make([]int64, len(keys))
	fetch := make([][]byte, 0, 2*len(keys))
	for i, k := range keys {
		if err := decodeKey(tx.q.l.pendingType(typ), k, &stimes[i], &ids[i]); err != nil {
			return nil, err
		}
		fetch = append(fetch, k, tx.q.l.job(typ, ids[i]))
	}
	if pre, ok := tx.t.(kv.PrefetchTx); ok {
		if err := pre.Prefetch(fetch...); err != nil {
			return nil, err
		}
	}
	snap, isSnap := tx.t.(kv.SnapshotTx)
	for i, k := range keys {
		if isSnap {
			if err := snap.AddReadConflictKey(k); err != nil {
				return nil, err
			}
		}
		// A pick from the tag index may be stale: its job taken since a
		// cached pick was read (picks.go), or the index entry left by a
		// queue that does not tag. Either way it is skipped.
		v, err := tx.t.Get(k)
		if err != nil {
			return nil, err
		}
		if v == nil {
			if tagKeys[i] != nil {
				if tv, err := tx.t.Get(tagKeys[i]); err != nil {
					return nil, err
				} else if tv != nil {
					tx.t.Clear(tagKeys[i])
				}
			}
			continue
		}
		if tagKeys[i] != nil {
			tx.t.Clear(tagKeys[i])
		}
		if err := tx.clearPending(typ, stimes[i], ids[i]); err != nil {
			return nil, err
		}
		r, err := tx.q.readRow(tx.t, typ, ids[i])
		if err != nil {
			return nil, err
		}
		if r == nil || r.state != rowPending {
			tx.q.log.Warn("dropped stale pending entry", "type", typ, "job_id", ids[i])
			continue
		}
		j, err := tx.startUnder(l, typ, ids[i], r)
		if err != nil {
			return nil, err
		}
		got = append(got, j)
	}
	return got, nil
}

// startUnder marks job typ/id (row r, not running under another live
// lease) running under l with a new lock, and returns it. A job that was
// running already (adopted) logs no event: its state does not change,
// and a commit that takes no versionstamp does not compete for one.
func (tx *Tx) startUnder(l *Lease, typ, id string, r *row) (*Job, error) {
	wasRunning := r.state == rowRunning
	data, err := tx.q.readData(tx.t, typ, id, r)
	if err != nil {
		return nil, err
	}
	r.state = rowRunning
	r.resubmit = false
	r.lock = newLock()
	r.seq = kv.Versionstamp{}
	tx.hold(l, typ, id)
	if !wasRunning {
		tx.logEvent(typ, id, Running)
	}
	tx.writeRow(typ, id, r)
	return &Job{Type: typ, ID: id, Data: data, lock: r.lock, lease: l}, nil
}

// adopt takes, as they stand, up to max running jobs of typ held under
// leases marked expired (whose holders write nothing more: see lease.go),
// from a random place in each one's list so that nodes adopting at once
// rarely want the same jobs.
func (tx *Tx) adopt(scan scanFunc, typ string, max int, l *Lease) ([]*Job, error) {
	var expired []string
	begin := tx.q.l.leases()
	err := scan(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
		var id string
		if err := decodeKey(begin, k, &id); err != nil {
			return err
		}
		if _, exp, err := decodeLease(id, v); err == nil && exp && id != l.id {
			expired = append(expired, id)
		}
		return nil
	})
	if err != nil || len(expired) == 0 {
		return nil, err
	}
	if expired, err = tx.ownFormat(expired); err != nil {
		return nil, err
	}
	var got []*Job
	for _, old := range expired {
		if len(got) == max {
			break
		}
		held := tx.q.l.leaseJobs(old)
		var rid [16]byte
		rand.Read(rid[:])
		at := tx.q.l.leaseJob(old, typ, hex.EncodeToString(rid[:]))
		type entry struct {
			key     []byte
			typ, id string
		}
		var found []entry
		collect := func(k, _ []byte) error {
			e := entry{key: append([]byte(nil), k...)}
			if err := decodeKey(held, k, &e.typ, &e.id); err != nil {
				return err
			}
			if e.typ == typ {
				found = append(found, e)
			}
			return nil
		}
		want := max - len(got)
		if err := scan(at, kv.PrefixEnd(held), kv.RangeOptions{Limit: want, KeysOnly: true}, collect); err != nil {
			return nil, err
		}
		if len(found) < want {
			if err := scan(held, at, kv.RangeOptions{Limit: want - len(found), KeysOnly: true}, collect); err != nil {
				return nil, err
			}
		}
		if pre, ok := tx.t.(kv.PrefetchTx); ok && len(found) > 0 {
			keys := make([][]byte, 0, 2*len(found))
			for _, e := range found {
				keys = append(keys, tx.q.l.holder(e.typ, e.id), tx.q.l.job(e.typ, e.id))
			}
			if err := pre.Prefetch(keys...); err != nil {
				return nil, err
			}
		}
		for _, e := range found {
			h, err := tx.t.Get(tx.q.l.holder(e.typ, e.id))
			if err != nil {
				return nil, err
			}
			if string(h) != old {
				continue // moved on since the scan
			}
			r, err := tx.q.readRow(tx.t, e.typ, e.id)
			if err != nil {
				return nil, err
			}
			if r != nil && r.state == rowRunning && r.resubmit {
				continue // due at its new stime: the release re-enqueues it
			}
			tx.t.Clear(e.key)
			if r == nil || r.state != rowRunning {
				tx.t.Clear(tx.q.l.holder(e.typ, e.id))
				continue
			}
			j, err := tx.startUnder(l, e.typ, e.id, r)
			if err != nil {
				return nil, err
			}
			got = append(got, j)
		}
	}
	return got, nil
}

// Adopt takes, in one transaction and as they stand, up to max (at most
// MaxAcceptBatch) running jobs of typ held under expired leases (a dead
// node's), under l; none when there are none. Unlike the pending jobs
// AcceptMany takes, these were running: no fair-share pick is due, they
// only move on to a live runner.
func (q *Queue) Adopt(ctx context.Context, typ string, max int, l *Lease) ([]*Job, error) {
	max = min(max, MaxAcceptBatch)
	if max <= 0 {
		return nil, nil
	}
	var got []*Job
	err := q.Transact(ctx, func(tx *Tx) error {
		got = nil
		if l.Valid() != nil {
			return ErrLeaseLost
		}
		if err := tx.leaseAlive(l); err != nil {
			return ErrLeaseLost
		}
		scan := tx.t.Range
		if snap, ok := tx.t.(kv.SnapshotTx); ok {
			scan = snap.SnapshotRange
		}
		var err error
		got, err = tx.adopt(scan, typ, max, l)
		return err
	})
	return got, err
}
