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

// cleanRound moves the stored horizon up to candidate when tombstones at
// or below candidate exist (moving it makes older transactions retry, so
// it only moves when there is something to remove), removes the tombstones
// at or below the stored horizon, and returns the current revision.
func (s *Store) cleanRound(candidate int64) (int64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	hk := string(s.horizonKey)
	resp, err := s.cli.Get(ctx, hk)
	if err != nil {
		return 0, err
	}
	now := resp.Header.Revision
	if len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != 8 {
		return now, nil
	}
	horizon := int64(binary.BigEndian.Uint64(resp.Kvs[0].Value))
	old, err := s.tombstones(ctx, now, max(horizon, candidate))
	if err != nil || len(old) == 0 {
		return now, err
	}
	if candidate > horizon {
		_, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(hk), "<", string(revBytes(candidate)))).
			Then(clientv3.OpPut(hk, string(revBytes(candidate)))).
			Commit()
		if err != nil {
			return 0, err
		}
		horizon = candidate
	}
	// Each tombstone is deleted only if not re-tombstoned since (a newer
	// tombstone is above the horizon and still needed): a nested Txn per
	// key, whose compare decides for that key alone, cleanDeletes of them
	// per commit, so that cleaning costs etcd a few commits, not one per
	// key.
	var batch []clientv3.Op
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := s.cli.Txn(ctx).Then(batch...).Commit()
		batch = batch[:0]
		return err
	}
	for _, key := range sortedKeys(old) {
		rev := old[key]
		if rev > horizon {
			continue
		}
		batch = append(batch, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, []clientv3.Op{clientv3.OpDelete(key)}, nil))
		if len(batch) == cleanDeletes {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return now, nil
}

// cleanDeletes is how many tombstones one cleaning commit deletes: etcd
// counts each nested Txn as an operation of its parent and checks the
// nested ones against what is left of --max-txn-ops.
const cleanDeletes = maxTxnOps / 2

// tombstones returns the tombstone keys with a ModRevision at or below
// upTo, as of revision rev.
func (s *Store) tombstones(ctx context.Context, rev, upTo int64) (map[string]int64, error) {
	out := map[string]int64{}
	tp := string(s.tombPrefix)
	from, end := tp, clientv3.GetPrefixRangeEnd(tp)
	for {
		page, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(500), clientv3.WithRev(rev))
		if err != nil {
			return nil, err
		}
		for _, kvp := range page.Kvs {
			if kvp.ModRevision <= upTo {
				out[string(kvp.Key)] = kvp.ModRevision
			}
		}
		if !page.More || len(page.Kvs) == 0 {
			return out, nil
		}
		from = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
}
