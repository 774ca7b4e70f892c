package etcd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultCompactInterval is Config.CompactInterval's default.
const DefaultCompactInterval = time.Minute

// compactLoop compacts etcd's history (its MVCC revisions) every interval,
// keeping one interval of it. The store needs little history: a
// transaction reads at its revision for at most a few seconds (one whose
// revision is compacted retries, as on a conflict), and watches start at
// the current revision. Without compaction every write keeps its old
// value, and etcd's data file grows until it hits its quota. Compaction
// frees pages inside the file, which later writes reuse: its size levels
// off; it does not shrink (Defragment does that, see cluster.md).
//
// Each round compacts up to the revision this node saw one round earlier,
// unless some node sharing the store compacted since then: a compare on
// the "m/compacted" key (the revision at which the last compaction was
// claimed) lets one node compact per interval, however many share it.
func (s *Store) compactLoop(interval time.Duration) {
	defer s.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev int64
	failing := false
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		now, err := s.compactRound(prev)
		if err != nil {
			if s.ctx.Err() == nil && !failing {
				s.log.Warn("etcd compaction failed; will retry (etcd's history grows meanwhile)", "error", err)
			}
			failing = true
			continue
		}
		if failing {
			s.log.Info("etcd compaction works again")
		}
		failing = false
		prev = now
	}
}

// compactRound compacts etcd's history up to candidate when no node has
// compacted since the revision candidate was seen, and returns the
// current revision (the next round's candidate).
func (s *Store) compactRound(candidate int64) (int64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	ck := string(s.compactKey)
	resp, err := s.cli.Get(ctx, ck)
	if err != nil {
		return 0, err
	}
	now := resp.Header.Revision
	if candidate <= 0 || len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != 8 {
		return now, nil
	}
	last := resp.Kvs[0].Value
	if int64(binary.BigEndian.Uint64(last)) > candidate {
		return now, nil // another node compacted since this one's last round
	}
	claim, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(ck), "=", string(last))).
		Then(clientv3.OpPut(ck, string(revBytes(now)))).
		Commit()
	if err != nil {
		return 0, err
	}
	if !claim.Succeeded {
		return now, nil // another node claimed this round
	}
	if err := s.compact(ctx, candidate, false); err != nil {
		return 0, err
	}
	s.log.Debug("etcd history compacted", "revision", candidate)
	return now, nil
}

// compact compacts etcd's history up to rev; history already compacted
// further (by another node, or etcd's own --auto-compaction-retention)
// is not an error.
func (s *Store) compact(ctx context.Context, rev int64, physical bool) error {
	var opts []clientv3.CompactOption
	if physical {
		opts = append(opts, clientv3.WithCompactPhysical())
	}
	_, err := s.cli.Compact(ctx, rev, opts...)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kv/etcd: compact to revision %d: %w", rev, err)
	}
	return nil
}

// Compact compacts all of etcd's history, up to the current revision, and
// returns once etcd has removed the old revisions from its data file
// (their pages are then free, still holding their bytes until reused or
// defragmented). Transactions in flight retry. The replicator calls it
// once after rewriting records that older versions stored in plaintext.
func (s *Store) Compact(ctx context.Context) error {
	resp, err := s.cli.Get(ctx, string(s.compactKey))
	if err != nil {
		return fmt.Errorf("kv/etcd: compact: %w", err)
	}
	rev := resp.Header.Revision
	if err := s.compact(ctx, rev, true); err != nil {
		return err
	}
	_, err = s.cli.Put(ctx, string(s.compactKey), string(revBytes(rev)))
	return err
}

// Defragment rewrites the data file of every etcd member, one at a time,
// dropping its free pages: the file shrinks to its live data, and the
// bytes of compacted revisions are gone from it. A member answers nothing
// else while it defragments (about a second per 100 MB). It needs etcd's
// root role when etcd has authentication on.
func (s *Store) Defragment(ctx context.Context) error {
	members, err := s.cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("kv/etcd: defragment: list members: %w", err)
	}
	var errs []error
	for _, m := range members.Members {
		if len(m.ClientURLs) == 0 {
			continue
		}
		if _, err := s.cli.Defragment(ctx, m.ClientURLs[0]); err != nil {
			errs = append(errs, fmt.Errorf("kv/etcd: defragment %s: %w", m.ClientURLs[0], err))
		}
	}
	return errors.Join(errs...)
}
