package jobs

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// setRaw writes value v under key k, as a node of another version would.
func setRaw(t *testing.T, q *Queue, k, v []byte) {
	t.Helper()
	err := q.store.Update(context.Background(), func(tx kv.Tx) error {
		tx.Set(k, v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func getRaw(t *testing.T, q *Queue, k []byte) []byte {
	t.Helper()
	var v []byte
	err := q.store.View(context.Background(), func(tx kv.ReadTx) error {
		var err error
		v, err = tx.Get(k)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), v...)
}

// TestNewerJobRowLeftAlone: a job row a newer version wrote in a format
// this one does not know is never rewritten: every operation on it fails
// with ErrNewerFormat and the row stays as it was.
func TestNewerJobRowLeftAlone(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		op   func(q *Queue, j *Job) error
	}{
		{"update", func(q *Queue, j *Job) error { return q.Update(ctx, j, []byte("mine")) }},
		{"finish", func(q *Queue, j *Job) error { return q.Finish(ctx, j, nil) }},
		{"resubmit", func(q *Queue, j *Job) error { return q.Resubmit(ctx, j, time.Time{}, nil) }},
		{"add", func(q *Queue, j *Job) error { return q.Add(ctx, typ, j.ID, []byte("again"), time.Time{}) }},
		{"remove", func(q *Queue, j *Job) error { return q.Remove(ctx, typ, j.ID) }},
		{"set data", func(q *Queue, j *Job) error {
			return q.Transact(ctx, func(tx *Tx) error { return tx.SetData(typ, j.ID, []byte("resealed")) })
		}},
		{"get state", func(q *Queue, j *Job) error { _, err := q.GetState(ctx, typ, j.ID); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, kv.NewMemory(), Options{})
			mustAdd(t, q, "a", "A", time.Time{})
			j := mustAccept(t, q)
			row := getRaw(t, q, q.l.job(typ, "a"))
			row[0] = RowFormat + 1
			setRaw(t, q, q.l.job(typ, "a"), row)
			if err := tc.op(q, j); !errors.Is(err, ErrNewerFormat) {
				t.Fatalf("got %v, want ErrNewerFormat", err)
			}
			if got := getRaw(t, q, q.l.job(typ, "a")); !bytes.Equal(got, row) {
				t.Fatalf("newer row rewritten:\n got %x\nwant %x", got, row)
			}
		})
	}
}

// TestLeaseValuesToleratedNewerFields: lease values a newer version
// extended with fields of its own are read, and an expiry keeps them.
func TestLeaseValuesToleratedNewerFields(t *testing.T) {
	q := newQueue(t, kv.NewMemory(), Options{})
	l := grantManual(t, q, LeaseOptions{Node: "n1", Format: 7})
	l.SetLoad(2, 9)
	if err := l.renewOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{q.l.lease(l.id), q.l.heartbeat(l.id), q.l.leaseVersion(l.id)} {
		setRaw(t, q, k, pack(getRaw(t, q, k), "a newer version's field", int64(42)))
	}
	newWatcher(q).look(t)
	got := q.Leases()
	if len(got) != 1 || got[0].Node != "n1" || got[0].Running != 2 || got[0].Capacity != 9 || got[0].LeaseFormat != LeaseFormat || got[0].Format != 7 {
		t.Fatalf("leases: %+v", got)
	}
	expired := expiredValue(l.id, getRaw(t, q, q.l.lease(l.id)))
	info, isExpired, err := decodeLease(l.id, expired)
	if err != nil || !isExpired || info.Node != "n1" {
		t.Fatalf("expired value: %+v %v %v", info, isExpired, err)
	}
	el, err := unpack(expired)
	if err != nil || len(el) != 7 || el[5] != "a newer version's field" || el[6] != int64(42) {
		t.Fatalf("expiry dropped the newer fields: %v %v", el, err)
	}
}

// TestNewerLeaseFormatNotAdopted: the jobs of an expired lease of a
// newer lease format are not adopted as they stand by this version (a
// node of its version does that); they are re-enqueued when the lease's
// expiry ends, as for any dead node. Those of this version's format are
// adopted.
func TestNewerLeaseFormatNotAdopted(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		format      int
		wantAdopted int
	}{
		{"own format", LeaseFormat, 1},
		{"newer format", LeaseFormat + 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock()
			q := newQueue(t, kv.NewMemory(), Options{Now: clock.Now})
			other := grantManual(t, q, LeaseOptions{Node: "other"})
			setRaw(t, q, q.l.leaseVersion(other.id), pack(nil, int64(tc.format), int64(9)))
			mustAdd(t, q, "a", "A", time.Time{})
			acceptUnder(t, q, other)

			// Marked expired by a lease watcher, its jobs not re-enqueued yet.
			markExpired(t, q, other)
			mine := grantManual(t, q, LeaseOptions{Node: "mine"})
			got, err := q.Adopt(ctx, typ, 10, mine)
			if err != nil || len(got) != tc.wantAdopted {
				t.Fatalf("adopted %d (%v), want %d", len(got), err, tc.wantAdopted)
			}
			if tc.wantAdopted > 0 {
				return
			}
			if _, err := q.AcceptMany(ctx, typ, 10, AcceptOptions{Lease: mine, NoWait: true}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("AcceptMany: %v, want ErrNotFound", err)
			}
			// A watcher leaves a lease marked expired a TTL to be adopted
			// (by a node of its version); then the job is pending, for any.
			w := newWatcher(q)
			w.look(t)
			clock.advance(leaseTTL)
			w.look(t)
			wantState(t, q, "a", Pending)
			if getRaw(t, q, q.l.leaseVersion(other.id)) != nil {
				t.Fatal("the expired lease's version key was left behind")
			}
		})
	}
}
