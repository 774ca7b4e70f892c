package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// TestEnqueuesDoNotConflictEtcd (issue 39 item 1): two transactions that
// each enqueue a different job of one type commit without retrying, on
// etcd, where a counter Add is a read: every enqueue once bumped the
// type's counter with one, so that concurrent adds of new jobs (a
// frontend's writers) ran one at a time, retrying, at about 6 a second.
// Acceptors still wake on each enqueue.
func TestEnqueuesDoNotConflictEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	cluster := etcdtest.StartCluster(t, 1)
	ctx := context.Background()
	prefix := fmt.Sprintf("enqueue-%d/", time.Now().UnixNano())
	open := func() *Queue {
		q := openEtcdQueue(t, cluster.Endpoints(), prefix, Options{})
		return q
	}
	q1, q2 := open(), open()
	if err := q1.SetTypeTimeout(ctx, typ, time.Minute); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	woken, err := q1.store.Watch(wctx, q1.l.counter(typ))
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err = q1.Transact(ctx, func(tx *Tx) error {
		attempts++
		if err := tx.Add(typ, "a", []byte("A"), time.Time{}); err != nil {
			return err
		}
		if attempts == 1 {
			// Another node's enqueue commits while this one runs.
			mustAdd(t, q2, "b", "B", time.Time{})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Fatalf("the enqueue ran %d times: it conflicted with another enqueue", attempts)
	}
	wantState(t, q1, "a", Pending)
	wantState(t, q1, "b", Pending)
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("an enqueue did not wake the watch on the type's counter")
	}
}
