package etcd

import (
	"context"
	"encoding/binary"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// cleanLoop removes tombstones that no live transaction can need. Each
// round moves the horizon to the revision seen one round earlier, so a
// transaction younger than one interval never fails the horizon check, and
// then deletes the tombstones at or below the horizon.
func (s *Store) cleanLoop(interval time.Duration) {
	defer s.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev int64
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		now, err := s.cleanRound(prev)
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("etcd tombstone cleanup failed; will retry", "error", err)
			}
			continue
		}
		prev = now
	}
}

// cleanRound moves the horizon to horizon (when it is ahead of the stored
// one), removes tombstones at or below the stored horizon, and returns the
// current revision.
func (s *Store) cleanRound(horizon int64) (int64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	hk := string(s.horizonKey)
	if horizon > 0 {
		_, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(hk), "<", string(revBytes(horizon)))).
			Then(clientv3.OpPut(hk, string(revBytes(horizon)))).
			Commit()
		if err != nil {
			return 0, err
		}
	}
	resp, err := s.cli.Get(ctx, hk)
	if err != nil {
		return 0, err
	}
	now := resp.Header.Revision
	if len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != 8 {
		return now, nil
	}
	stored := int64(binary.BigEndian.Uint64(resp.Kvs[0].Value))
	tp := string(s.tombPrefix)
	from := tp
	end := clientv3.GetPrefixRangeEnd(tp)
	for {
		page, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(maxTxnOps/2), clientv3.WithRev(now))
		if err != nil {
			return 0, err
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, kvp := range page.Kvs {
			if kvp.ModRevision <= stored {
				// Only if not re-tombstoned since: a newer tombstone is
				// above the horizon and still needed.
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kvp.Key)), "=", kvp.ModRevision))
				ops = append(ops, clientv3.OpDelete(string(kvp.Key)))
			}
		}
		for i := range ops {
			// One Txn per tombstone keeps a re-tombstoned key from blocking
			// the others; batches are small.
			if _, err := s.cli.Txn(ctx).If(cmps[i]).Then(ops[i]).Commit(); err != nil {
				return 0, err
			}
		}
		if !page.More || len(page.Kvs) == 0 {
			return now, nil
		}
		from = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
}
