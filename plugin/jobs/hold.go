package jobs

import (
	"context"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Taking a job from its runner before its data changes: a runner holds a
// job under its lease and learns that the job was taken (Remove, Hold) from
// the halted keys of its lease. A taken job is signalled to the lease
// (haltSignal), whose renewal goroutine watches the signal and reads its
// halted keys at once instead of at its next renewal; the keys are cleared
// only after LeaseOptions.Halted has been called with them. So once a
// job's halted key is gone, its runner has been told to stop (or its lease
// is gone), which is what WaitHalted waits for.

// Halt names a job taken from the holder of a lease (Tx.Hold), for
// WaitHalted. The zero Halt names none: the job had no holder to tell.
type Halt struct {
	lease, typ, id string
	at             time.Time // when the hold committed (the queue's clock)
}

// Held reports whether h names a job taken from a lease's holder.
func (h Halt) Held() bool { return h.lease != "" }

// Hold puts job typ/id back in the pending queue, due at notBefore at the
// earliest, taking it from its runner if it runs: a runner holding it under
// a lease is told at once (see WaitHalted), one holding it by activity gets
// ErrHalt at its next Update. A pending job due before notBefore is
// delayed to it; one due later (a parked job) keeps its time; a finished
// job is left as it is. The job's data does not change. ErrNotFound when
// there is no such job.
//
// Hold is for a caller about to replace or remove the job's data (a doc
// edit) who must know the old run stopped first; if it then does nothing,
// the job runs again at notBefore.
func (tx *Tx) Hold(typ, id string, notBefore time.Time) (Halt, error) {
	r, err := tx.q.jobRow(tx.t, typ, id)
	if err != nil {
		return Halt{}, err
	}
	due := ms(notBefore)
	var h Halt
	switch r.state {
	case rowFinished:
		return Halt{}, nil
	case rowPending:
		if r.stime >= due {
			return Halt{}, nil
		}
		if err := tx.clearPending(typ, r.stime, id); err != nil {
			return Halt{}, err
		}
	case rowRunning:
		holder, err := tx.t.Get(tx.q.l.holder(typ, id))
		if err != nil {
			return Halt{}, err
		}
		if holder != nil {
			tx.takeFromHolder(string(holder), typ, id, r)
			h = Halt{lease: string(holder), typ: typ, id: id, at: tx.q.opts.Now()}
		} else {
			tx.stopRunning(typ, id, r)
		}
	}
	if err := tx.enqueue(typ, id, r, due, nil); err != nil {
		return Halt{}, err
	}
	tx.writeRow(typ, id, r)
	return h, nil
}

// takeFromHolder records that running job typ/id (row r) is no longer held
// under lease holder, and tells the holder: its halted key, read by the
// lease's renewal goroutine, which the signal wakes.
func (tx *Tx) takeFromHolder(holder, typ, id string, r *row) {
	tx.unhold(holder, typ, id)
	tx.t.Set(tx.q.l.haltedJob(holder, typ, id), r.lock[:])
	tx.t.Add(tx.q.l.haltSignal(holder), 1)
}

// WaitHalted waits until the holder the job of h was taken from has been
// told to stop it (LeaseOptions.Halted returned), or its lease is gone or
// expired, or half the lease's TTL has passed since the hold (the holder
// then either saw the hold at a renewal or is no longer valid, so it
// writes nothing more for the job). It returns ctx's error if ctx ends
// first. A zero h returns at once.
func (q *Queue) WaitHalted(ctx context.Context, h Halt) error {
	if !h.Held() {
		return nil
	}
	key := q.l.haltedJob(h.lease, h.typ, h.id)
	for {
		wctx, cancel := context.WithCancel(ctx)
		fired, err := q.store.Watch(wctx, key)
		if err != nil {
			cancel()
			return err
		}
		var ttl time.Duration
		done := false
		err = q.store.View(ctx, func(t kv.ReadTx) error {
			v, err := t.Get(key)
			if err != nil || v == nil {
				done = err == nil
				return err
			}
			lv, err := t.Get(q.l.lease(h.lease))
			if err != nil {
				return err
			}
			info, expired, derr := decodeLease(h.lease, lv)
			done = lv == nil || derr != nil || expired
			ttl = info.TTL
			return nil
		})
		if err != nil || done {
			cancel()
			return err
		}
		left := time.Duration(1<<63 - 1)
		if ttl > 0 {
			left = h.at.Add(ttl / 2).Sub(q.opts.Now())
		}
		if left <= 0 {
			cancel()
			return nil
		}
		timer := time.NewTimer(left)
		select {
		case <-fired:
			err = nil
		case <-timer.C:
			done = true
		case <-ctx.Done():
			err = ctx.Err()
		}
		timer.Stop()
		cancel()
		if err != nil || done {
			return err
		}
	}
}
