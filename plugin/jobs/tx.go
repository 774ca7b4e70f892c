package jobs

import (
	"bytes"
	"context"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Tx runs job operations and the caller's own key-value work in one
// transaction (Queue.Transact). It must not be used after the transaction
// function returns.
type Tx struct {
	q       *Queue
	t       kv.Tx
	nlog    int
	touched map[string]struct{}
}

// Transact runs fn in one serializable transaction. fn may be retried on
// conflict, so it must be idempotent. Changes to Job values made by a
// failed attempt may remain; callers retry with the same Job.
//
// On FoundationDB, a job row written in a transaction carries a placeholder
// versionstamp and cannot be read again in the same transaction: do not
// operate twice on the same job inside one Transact.
func (q *Queue) Transact(ctx context.Context, fn func(tx *Tx) error) error {
	select {
	case <-q.closed:
		return ErrClosed
	default:
	}
	return q.store.Update(ctx, func(t kv.Tx) error {
		tx := &Tx{q: q, t: t}
		if err := fn(tx); err != nil {
			return err
		}
		tx.commit()
		return nil
	})
}

// commit stamps the watermark of every touched type, waking notifiers.
func (tx *Tx) commit() {
	for typ := range tx.touched {
		vs := tx.t.Versionstamp()
		tx.t.Set(tx.q.l.watermark(typ), vs[:])
	}
}

// KV returns the underlying transaction for the caller's own keys, which
// must live outside the queue's prefix.
func (tx *Tx) KV() kv.Tx { return tx.t }

// logEvent records a transition of typ/id for subscribers.
func (tx *Tx) logEvent(typ, id string, st State) {
	if tx.touched == nil {
		tx.touched = make(map[string]struct{})
	}
	tx.touched[typ] = struct{}{}
	tx.nlog++
	tx.t.Set(tx.q.l.log(typ, tx.t.Versionstamp(), tx.nlog), pack(nil, id, string(st), tx.q.opts.Now().UnixMilli()))
}

// readRow reads a job row (without chunked data); nil when absent.
func (q *Queue) readRow(t kv.ReadTx, typ, id string) (*row, error) {
	v, err := t.Get(q.l.job(typ, id))
	if err != nil || v == nil {
		return nil, err
	}
	return decodeRow(v)
}

// jobRow is readRow for a job that must exist: ErrNotFound if it does not.
func (q *Queue) jobRow(t kv.ReadTx, typ, id string) (*row, error) {
	r, err := q.readRow(t, typ, id)
	if err == nil && r == nil {
		err = ErrNotFound
	}
	return r, err
}

// jobData reads the data of typ/id; ErrNotFound if the job does not exist.
func (q *Queue) jobData(t kv.ReadTx, typ, id string) ([]byte, error) {
	r, err := q.jobRow(t, typ, id)
	if err != nil {
		return nil, err
	}
	return q.readData(t, typ, id, r)
}

// readData assembles a job's data from its row and chunks.
func (q *Queue) readData(t kv.ReadTx, typ, id string, r *row) ([]byte, error) {
	if r.total <= len(r.inline) {
		return append([]byte{}, r.inline...), nil
	}
	data := make([]byte, 0, r.total)
	data = append(data, r.inline...)
	begin := q.l.chunks(typ, id)
	err := t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(_, v []byte) error {
		data = append(data, v...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(data) != r.total {
		return nil, errBadKey
	}
	return data, nil
}

// setData stores data in r (first chunk) and chunk keys (the rest).
func (tx *Tx) setData(typ, id string, r *row, data []byte) error {
	if len(data) > MaxDataSize {
		return ErrDataTooLarge
	}
	if r.total > len(r.inline) {
		begin := tx.q.l.chunks(typ, id)
		tx.t.ClearRange(begin, kv.PrefixEnd(begin))
	}
	r.total = len(data)
	first := min(len(data), ChunkSize)
	r.inline = append([]byte{}, data[:first]...)
	for n, off := 1, first; off < len(data); n++ {
		end := min(len(data), off+ChunkSize)
		tx.t.Set(tx.q.l.chunk(typ, id, n), data[off:end])
		off = end
	}
	return nil
}

func (tx *Tx) writeRow(typ, id string, r *row) {
	tx.t.Set(tx.q.l.job(typ, id), r.encode())
}

// enqueue makes r pending at stime and wakes acceptors. data is the job's
// current data when the caller has it (nil: read it when tagging needs it).
func (tx *Tx) enqueue(typ, id string, r *row, stime int64, data []byte) error {
	r.state = rowPending
	r.resubmit = false
	r.lock = [16]byte{}
	r.seq = kv.Versionstamp{}
	r.stime = stime
	if err := tx.setPending(typ, id, r, stime, data); err != nil {
		return err
	}
	tx.wake(typ)
	tx.logEvent(typ, id, Pending)
	return nil
}

// wake changes typ's counter, which acceptors watch. Its value means
// nothing: a blind write of a fresh one, not an Add, since an Add is a
// read on etcd (which has none of its own) and made every two
// transactions that enqueue a job of one type conflict, so that 4
// writers of new jobs managed about 6 a second on a 3-member etcd.
func (tx *Tx) wake(typ string) {
	v := newLock()
	tx.t.Set(tx.q.l.counter(typ), v[:8])
}

// stopRunning drops r's activity entry.
func (tx *Tx) stopRunning(typ, id string, r *row) {
	tx.t.Clear(tx.q.l.activity(typ, r.seq, id))
}

// heartbeat moves a running job's activity entry to this transaction's
// versionstamp.
func (tx *Tx) heartbeat(typ, id string, r *row) {
	vs := tx.t.Versionstamp()
	r.seq = vs
	tx.t.Set(tx.q.l.activity(typ, vs, id), nil)
	tx.logEvent(typ, id, Running)
}

// owned returns the row of a job the caller holds the lock of, or ErrHalt;
// held reports whether the job is held under a lease (which must then be
// the caller's, live in the store and valid) rather than by activity.
func (tx *Tx) owned(j *Job) (r *row, held bool, err error) {
	r, err = tx.q.readRow(tx.t, j.Type, j.ID)
	if err != nil {
		return nil, false, err
	}
	if r == nil || r.state != rowRunning || !bytes.Equal(r.lock[:], j.lock[:]) {
		return nil, false, ErrHalt
	}
	if j.lease == nil {
		return r, false, nil
	}
	h, err := tx.t.Get(tx.q.l.holder(j.Type, j.ID))
	if err != nil {
		return nil, false, err
	}
	if string(h) != j.lease.id || j.lease.Valid() != nil {
		return nil, false, ErrHalt
	}
	if err := tx.leaseAlive(j.lease); err != nil {
		return nil, false, err
	}
	return r, true, nil
}

// leaseAlive returns ErrHalt unless lease l is live in the store.
func (tx *Tx) leaseAlive(l *Lease) error {
	v, err := tx.t.Get(tx.q.l.lease(l.id))
	if err != nil {
		return err
	}
	if v == nil {
		return ErrHalt
	}
	if _, expired, err := decodeLease(l.id, v); err != nil || expired {
		return ErrHalt
	}
	return nil
}

// hold records that running job typ/id is held under lease l.
func (tx *Tx) hold(l *Lease, typ, id string) {
	tx.t.Set(tx.q.l.holder(typ, id), []byte(l.id))
	tx.t.Set(tx.q.l.leaseJob(l.id, typ, id), nil)
}

// unhold drops the record of running job typ/id being held under lease id.
func (tx *Tx) unhold(lease, typ, id string) {
	tx.t.Clear(tx.q.l.holder(typ, id))
	tx.t.Clear(tx.q.l.leaseJob(lease, typ, id))
}

// Add adds job typ/id with data, scheduled at stime (zero = as soon as
// possible). The type needs a timeout (ErrNoTypeTimeout). Re-adding an
// existing job: a finished one is re-enqueued with the new data; a pending
// one gets the new stime and data; a running one is flagged resubmit with
// the new stime (its data is not changed), so Finish re-enqueues it.
func (tx *Tx) Add(typ, id string, data []byte, stime time.Time) error {
	tm, err := tx.t.Get(tx.q.l.timeout(typ))
	if err != nil {
		return err
	}
	if tm == nil {
		return ErrNoTypeTimeout
	}
	if len(data) > MaxDataSize {
		return ErrDataTooLarge
	}
	st := ms(stime)
	r, err := tx.q.readRow(tx.t, typ, id)
	if err != nil {
		return err
	}
	switch {
	case r == nil || r.state == rowFinished:
		if r == nil {
			r = &row{}
		}
		if err := tx.setData(typ, id, r, data); err != nil {
			return err
		}
		if err := tx.enqueue(typ, id, r, st, data); err != nil {
			return err
		}
	case r.state == rowPending:
		if err := tx.setData(typ, id, r, data); err != nil {
			return err
		}
		if r.stime != st {
			if err := tx.clearPending(typ, r.stime, id); err != nil {
				return err
			}
			if err := tx.enqueue(typ, id, r, st, data); err != nil {
				return err
			}
		} else {
			if tx.q.opts.Tag != nil {
				// Same place in the queue; the tag may change with the data.
				if err := tx.clearPending(typ, st, id); err != nil {
					return err
				}
				if err := tx.setPending(typ, id, r, st, data); err != nil {
					return err
				}
			}
			tx.logEvent(typ, id, Pending)
		}
	default: // running
		r.resubmit = true
		r.stime = st
	}
	tx.writeRow(typ, id, r)
	return nil
}

// Remove deletes job typ/id in any state (ErrNotFound if absent). A runner
// holding it gets ErrHalt on its next Update or Finish; subscribers get a
// NotFound event.
func (tx *Tx) Remove(typ, id string) error {
	r, err := tx.q.jobRow(tx.t, typ, id)
	if err != nil {
		return err
	}
	switch r.state {
	case rowPending:
		if err := tx.clearPending(typ, r.stime, id); err != nil {
			return err
		}
	case rowRunning:
		h, err := tx.t.Get(tx.q.l.holder(typ, id))
		if err != nil {
			return err
		}
		if h != nil {
			// Tell the holder now, so it stops at once rather than at
			// its next write for the job.
			tx.takeFromHolder(string(h), typ, id, r)
		} else {
			tx.stopRunning(typ, id, r)
		}
	}
	if r.total > len(r.inline) {
		begin := tx.q.l.chunks(typ, id)
		tx.t.ClearRange(begin, kv.PrefixEnd(begin))
	}
	tx.t.Clear(tx.q.l.job(typ, id))
	tx.logEvent(typ, id, NotFound)
	return nil
}

// release checks that j's runner still holds the job, replaces its data
// unless data is nil, and, unless keep is set, drops the job's record of
// being running (activity entry or lease hold); the caller decides what
// the job becomes (heartbeat, finished, pending) and writes the row.
func (tx *Tx) release(j *Job, data []byte, keep bool) (*row, bool, error) {
	r, held, err := tx.owned(j)
	if err != nil {
		return nil, false, err
	}
	if data != nil {
		if err := tx.setData(j.Type, j.ID, r, data); err != nil {
			return nil, false, err
		}
	}
	switch {
	case held && !keep:
		tx.unhold(j.lease.id, j.Type, j.ID)
	case !held:
		tx.stopRunning(j.Type, j.ID, r)
	}
	return r, held, nil
}

// Update is the runner's heartbeat: it proves the runner is alive (the
// activity monitor leaves the job alone for another type timeout) and
// replaces the data unless data is nil. ErrHalt when the lock was lost.
// j.Resubmit reports whether the job was re-added meanwhile. For a job
// held under a lease, it proves the lease still holds the job (the lease
// keeps it alive); only progress worth recording needs an Update.
func (tx *Tx) Update(j *Job, data []byte) error {
	r, held, err := tx.release(j, data, true)
	if err != nil {
		return err
	}
	if held {
		tx.logEvent(j.Type, j.ID, Running)
	} else {
		tx.heartbeat(j.Type, j.ID, r)
	}
	tx.writeRow(j.Type, j.ID, r)
	j.Resubmit = r.resubmit
	if data != nil {
		j.Data = data
	}
	return nil
}

// Finish releases a running job: it becomes finished, or pending again (at
// the stime of the re-add) if it was re-added while running. data replaces
// the job's data unless nil. ErrHalt when the lock was lost.
func (tx *Tx) Finish(j *Job, data []byte) error {
	r, _, err := tx.release(j, data, false)
	if err != nil {
		return err
	}
	if r.resubmit {
		if err := tx.enqueue(j.Type, j.ID, r, r.stime, data); err != nil {
			return err
		}
	} else {
		r.state = rowFinished
		r.lock = [16]byte{}
		r.seq = kv.Versionstamp{}
		tx.logEvent(j.Type, j.ID, Finished)
	}
	tx.writeRow(j.Type, j.ID, r)
	if data != nil {
		j.Data = data
	}
	return nil
}

// Resubmit puts a running job back in the pending queue at stime (zero = as
// soon as possible) and releases it; data replaces the job's data unless
// nil. ErrHalt when the lock was lost.
func (tx *Tx) Resubmit(j *Job, stime time.Time, data []byte) error {
	r, _, err := tx.release(j, data, false)
	if err != nil {
		return err
	}
	if err := tx.enqueue(j.Type, j.ID, r, ms(stime), data); err != nil {
		return err
	}
	tx.writeRow(j.Type, j.ID, r)
	if data != nil {
		j.Data = data
	}
	return nil
}

// SetData replaces the data of job typ/id in any state, leaving its state,
// its runner's lock and its place in the pending queue as they are
// (ErrNotFound if absent); a pending job is tagged again from the new
// data. It is for rewriting stored data in place (the replicator seals
// records written before it sealed them): a running job's runner is not
// told, and its next Update replaces the data again.
func (tx *Tx) SetData(typ, id string, data []byte) error {
	r, err := tx.q.jobRow(tx.t, typ, id)
	if err != nil {
		return err
	}
	if err := tx.setData(typ, id, r, data); err != nil {
		return err
	}
	if r.state == rowPending && tx.q.opts.Tag != nil {
		if err := tx.clearPending(typ, r.stime, id); err != nil {
			return err
		}
		if err := tx.setPending(typ, id, r, r.stime, data); err != nil {
			return err
		}
	}
	tx.writeRow(typ, id, r)
	return nil
}

// GetState returns the state of typ/id, ErrNotFound if absent.
func (tx *Tx) GetState(typ, id string) (State, error) {
	r, err := tx.q.jobRow(tx.t, typ, id)
	if err != nil {
		return "", err
	}
	return r.State(), nil
}

// GetData returns the data of typ/id, ErrNotFound if absent.
func (tx *Tx) GetData(typ, id string) ([]byte, error) {
	return tx.q.jobData(tx.t, typ, id)
}
