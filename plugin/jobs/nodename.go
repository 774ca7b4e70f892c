package jobs

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// nodeHolder returns the live (not expired) lease that holds node, nil
// when none does. It reads every lease: there is one per process.
func (q *Queue) nodeHolder(t kv.ReadTx, node string) (*LeaseInfo, error) {
	var holder *LeaseInfo
	begin := q.l.leases()
	err := t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
		var id string
		if err := decodeKey(begin, k, &id); err != nil {
			return err
		}
		info, expired, err := decodeLease(id, v)
		if err == nil && !expired && info.Node == node {
			holder = &info
			return errStop
		}
		return nil
	})
	if err == errStop {
		err = nil
	}
	return holder, err
}

// freeNode makes way for l to take its node name from holder's lease (see
// Grant): it expires holder when holder is surely dead, else watches its
// heartbeat until it changes (ErrNodeInUse), the lease goes, or a whole
// TTL passes unrenewed (then it expires it, as any lease watcher would).
func (q *Queue) freeNode(ctx context.Context, l *Lease, holder LeaseInfo) error {
	own, mine := q.own.Load(holder.ID)
	switch {
	case l.opts.Replaces != nil && l.opts.Replaces(holder):
		_, err := q.expireLease(ctx, holder.ID, nil, "replaced by a new process of its node")
		return err
	case mine && own.(*Lease).Err() != nil:
		// This queue's own lost lease, not revoked yet: it writes no more.
		_, err := q.expireLease(ctx, holder.ID, nil, "replaced by a new lease of its holder")
		return err
	case mine:
		return fmt.Errorf("%w: node %q already holds lease %s in this process", ErrNodeInUse, holder.Node, holder.ID)
	case q.opts.Exclusive:
		// Alone on the store: a lease this queue did not grant is an
		// earlier process's, dead since this one holds the store.
		_, err := q.expireLease(ctx, holder.ID, nil, "left by an earlier process")
		return err
	}
	hb, gone, err := q.leaseHeartbeat(ctx, holder.ID)
	if err != nil || gone {
		return err
	}
	since := q.opts.Now()
	poll := min(max(holder.TTL/20, 5*time.Millisecond), time.Second)
	q.log.Info("node name held by another lease; waiting to see whether it is renewed", "node", holder.Node, "lease", holder.ID, "host", holder.Host, "pid", holder.PID, "ttl", holder.TTL.String())
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.closed:
			return ErrClosed
		case <-t.C:
		}
		cur, gone, err := q.leaseHeartbeat(ctx, holder.ID)
		if err != nil || gone {
			return err
		}
		if !bytes.Equal(cur, hb) {
			return fmt.Errorf("%w: node %q is held by the lease of host %s pid %d, which is still renewed; give each process its own node name", ErrNodeInUse, holder.Node, holder.Host, holder.PID)
		}
		if waited := q.opts.Now().Sub(since); waited >= holder.TTL {
			done, err := q.expireLease(ctx, holder.ID, hb, "not renewed for "+waited.Round(time.Millisecond).String()+" while a new process of its node waited")
			if err != nil || done {
				return err
			}
			// Renewed just now: the next look says so.
		}
	}
}

// leaseHeartbeat reads lease id's heartbeat; gone when the lease is gone
// or expired.
func (q *Queue) leaseHeartbeat(ctx context.Context, id string) (hb []byte, gone bool, err error) {
	err = q.store.View(ctx, func(t kv.ReadTx) error {
		v, err := t.Get(q.l.lease(id))
		if err != nil {
			return err
		}
		if _, expired, err := decodeLease(id, v); v == nil || err != nil || expired {
			gone = true
			return nil
		}
		hb, err = t.Get(q.l.heartbeat(id))
		return err
	})
	return hb, gone, err
}
