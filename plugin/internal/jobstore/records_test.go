package jobstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/kvtest"
)

// testKeys seals the records of these tests.
var testKeys = seal.NewKeyring(seal.RandomKey())

// testQueue returns a replication job queue in memory and a replication
// to put in it.
func testQueue(t *testing.T) (*jobs.Queue, *parse.Rep) {
	t.Helper()
	q, err := jobs.New(kv.NewMemory(), jobs.Options{Prefix: []byte(QueuePrefix)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.SetTypeTimeout(context.Background(), jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	return q, &parse.Rep{Source: parse.Endpoint{URL: "http://h/a/"}, Target: parse.Endpoint{URL: "http://h/b/"}}
}

func TestRecords(t *testing.T) {
	ctx := context.Background()
	q, rep := testQueue(t)
	var err error
	persistent := parse.PersistentJobID("u1", "doc")
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		SetDBSeq(tx.KV(), "a/_replicator", DBSeq{UUID: "u1", Seq: "7"})
		r := jobdata.New(rep, "a/_replicator", "u1", "doc", time.Unix(100, 0))
		r.RepID = "abc+continuous"
		SetRepIDOwner(tx.KV(), r.RepID, persistent)
		if err := tx.Add(jobdata.JobType, persistent, r.Encode(testKeys, persistent), time.Time{}); err != nil {
			return err
		}
		SetTransientDone(tx.KV(), "t1", 50)
		return tx.Add(jobdata.JobType, "t1", jobdata.New(rep, "", "", "", time.Unix(1, 0)).Encode(testKeys, "t1"), time.Time{})
	})
	if err != nil {
		t.Fatal(err)
	}
	recs := Records{Q: q, Keys: testKeys}
	tests := []struct {
		name, id, want string
	}{
		{"rep id", "abc+continuous", persistent},
		{"rep id with + decoded as space", "abc continuous", persistent},
		{"job id", "t1", "t1"},
		{"unknown", "nope", ""},
	}
	for _, tt := range tests {
		got, err := recs.Resolve(ctx, tt.id)
		if got != tt.want || (tt.want == "" && !errors.Is(err, ErrNotFound)) {
			t.Errorf("%s: Resolve(%q) = %q, %v", tt.name, tt.id, got, err)
		}
	}
	if r, err := recs.Doc(ctx, "a/_replicator", "doc"); err != nil || r.DocID != "doc" {
		t.Fatalf("Doc: %+v, %v", r, err)
	}
	if _, err := recs.Doc(ctx, "b/_replicator", "doc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Doc of unknown db: %v", err)
	}
	if got, err := recs.CountStates(ctx); err != nil || len(got) != 1 || got[jobdata.Pending] != 2 {
		t.Fatalf("CountStates = %v, %v; want 2 pending", got, err)
	}
	// Remove releases the rep id and the transient index entry.
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		if err := Remove(tx, persistent); err != nil {
			return err
		}
		if err := Remove(tx, "t1"); err != nil {
			return err
		}
		return Remove(tx, "never-existed")
	})
	if err != nil {
		t.Fatal(err)
	}
	q.Transact(ctx, func(tx *jobs.Tx) error {
		if o, _ := RepIDOwner(tx.KV(), "abc+continuous"); o != "" {
			t.Errorf("rep id still owned by %q", o)
		}
		if done, _ := FinishedTransient(tx.KV()); len(done) != 0 {
			t.Errorf("transient index kept %v", done)
		}
		return nil
	})
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	q, rep := testQueue(t)
	var err error
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		if err := tx.Add(jobdata.JobType, "good", jobdata.New(rep, "", "", "", time.Unix(1, 0)).Encode(testKeys, "good"), time.Time{}); err != nil {
			return err
		}
		return tx.Add(jobdata.JobType, "bad", []byte("{not json"), time.Time{})
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id      string
		wantErr error
	}{
		{"good", nil},
		{"bad", ErrUndecodable},
		{"absent", jobs.ErrNotFound},
	}
	for _, tc := range tests {
		err := q.Transact(ctx, func(tx *jobs.Tx) error {
			rec, err := Get(tx, testKeys, tc.id)
			if err == nil && (rec.Rep == nil || rec.Rep.Source.URL != "http://h/a/") {
				t.Errorf("%s: got %+v", tc.id, rec)
			}
			return err
		})
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s: err = %v, want %v", tc.id, err, tc.wantErr)
		}
	}
}

// TestGetManyReadsAtOnce: a page of _scheduler/jobs reads its records in
// a few requests, not one round trip per job (on etcd a page of 1,000
// jobs took 5 to 40 s).
func TestGetManyReadsAtOnce(t *testing.T) {
	ctx := context.Background()
	store := &kvtest.RoundTrips{Store: kv.NewMemory()}
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(QueuePrefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://h/a/"}, Target: parse.Endpoint{URL: "http://h/b/"}}
	var ids []string
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		for i := 0; i < 200; i++ {
			id := fmt.Sprintf("job%03d", i)
			ids = append(ids, id)
			if err := tx.Add(jobdata.JobType, id, jobdata.New(rep, "", "", "", time.Unix(1, 0)).Encode(testKeys, id), time.Time{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before := store.Count()
	recs, err := Records{Q: q, Keys: testKeys}.GetMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r == nil {
			t.Fatalf("record %d missing", i)
		}
	}
	if got := store.Count() - before; got > 2 {
		t.Fatalf("GetMany of %d jobs: %d store round trips, want at most 2", len(ids), got)
	}
}
