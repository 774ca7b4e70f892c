package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// errStop ends a range read early.
var errStop = errors.New("stop")

// foldBatch is how many jobs Fold reads per transaction, and foldBatchBytes
// how much job data (a batch ends after the job that crosses it), so that a
// fold transaction stays short on FoundationDB.
const (
	foldBatch      = 500
	foldBatchBytes = 4 << 20
)

// Fold calls fn for every job of type typ in id order with its state and
// data. Jobs are read in batches of separate transactions (so a huge type
// never makes one long transaction) and fn runs outside them, so it may use
// the queue. An error from fn stops the fold and is returned.
func (q *Queue) Fold(ctx context.Context, typ string, fn func(id string, st State, data []byte) error) error {
	prefix := q.l.jobs(typ)
	begin, end := prefix, kv.PrefixEnd(prefix)
	type item struct {
		id   string
		st   State
		data []byte
	}
	for {
		var items []item
		var last []byte
		err := q.store.View(ctx, func(t kv.ReadTx) error {
			items, last = items[:0], nil
			var rows []struct {
				id string
				r  *row
			}
			size := 0
			err := t.Range(begin, end, kv.RangeOptions{Limit: foldBatch}, func(k, v []byte) error {
				if size >= foldBatchBytes {
					return errStop
				}
				var id string
				if err := decodeKey(prefix, k, &id); err != nil {
					return err
				}
				r, err := decodeRow(v)
				if err != nil {
					return err
				}
				rows = append(rows, struct {
					id string
					r  *row
				}{id, r})
				last = append(last[:0], k...)
				size += r.total
				return nil
			})
			if err != nil && err != errStop {
				return err
			}
			for _, x := range rows {
				data, err := q.readData(t, typ, x.id, x.r)
				if err != nil {
					return err
				}
				items = append(items, item{x.id, x.r.State(), data})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := fn(it.id, it.st, it.data); err != nil {
				return err
			}
		}
		if last == nil {
			return nil
		}
		begin = append(last, 0)
	}
}

// PendingCount counts pending jobs of typ scheduled at or before
// maxSchedTime (zero = now), stopping at limit (limit ≤ 0 = no limit).
func (q *Queue) PendingCount(ctx context.Context, typ string, maxSchedTime time.Time, limit int) (int, error) {
	maxS := ms(maxSchedTime)
	if maxSchedTime.IsZero() {
		maxS = q.opts.Now().UnixMilli()
	}
	n := 0
	err := q.store.View(ctx, func(t kv.ReadTx) error {
		n = 0
		return t.Range(q.l.pendingType(typ), kv.PrefixEnd(q.l.pendingAt(typ, maxS)), kv.RangeOptions{Limit: max(limit, 0)}, func(_, _ []byte) error {
			n++
			return nil
		})
	})
	return n, err
}
