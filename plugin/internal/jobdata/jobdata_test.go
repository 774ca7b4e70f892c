package jobdata

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// testKeys seals the records of these tests.
var testKeys = seal.NewKeyring(seal.RandomKey())

// testQueue returns a replication job queue in memory and a replication
// to put in it.
func testQueue(t *testing.T) (*jobs.Queue, *parse.Rep) {
	t.Helper()
	q, err := jobs.New(kv.NewMemory(), jobs.Options{Prefix: QueuePrefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.SetTypeTimeout(context.Background(), JobType, time.Minute); err != nil {
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
		r := New(rep, "a/_replicator", "u1", "doc", time.Unix(100, 0))
		r.RepID = "abc+continuous"
		SetRepIDOwner(tx.KV(), r.RepID, persistent)
		if err := tx.Add(JobType, persistent, r.Encode(testKeys), time.Time{}); err != nil {
			return err
		}
		SetTransientDone(tx.KV(), "t1", 50)
		return tx.Add(JobType, "t1", New(rep, "", "", "", time.Unix(1, 0)).Encode(testKeys), time.Time{})
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
	if got, err := recs.CountStates(ctx); err != nil || len(got) != 1 || got[Pending] != 2 {
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

func TestStateOf(t *testing.T) {
	failed := NewFailed("db/_replicator", "u", "d", "bad doc", time.Unix(1, 0))
	tests := []struct {
		data string
		want string
		ok   bool
	}{
		{string(failed.Encode(testKeys)), Failed, true},
		{string(New(nil, "", "", "", time.Unix(1, 0)).Encode(testKeys)), Pending, true},
		{`{"rep":{"state":"x"},"job_history":[{"state":"y"}],"state":"running"}`, Running, true},
		{` { "state" : "cr\u0061shing" } `, Crashing, true},
		{`{"state":1}`, "", false},
		{`{"State":"running"}`, "", false},
		{`{}`, "", false},
		{`["state","running"]`, "", false},
		{`{"state":"runn`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		got, ok := StateOf([]byte(tt.data))
		if got != tt.want || ok != tt.ok {
			t.Errorf("StateOf(%s) = %q, %v; want %q, %v", tt.data, got, ok, tt.want, tt.ok)
		}
	}
}

func TestFailure(t *testing.T) {
	tests := []struct {
		kind, info   string
		status       int
		name, reason string
	}{
		{"db_not_found", "db_not_found: could not open http://h/db/", 500, "db_not_found", "could not open http://h/db/"},
		{"", "Duplicate job running: x", 500, "error", "Duplicate job running: x"},
		{"", "Replication `a` specified by document `b`: x", 500, "error", "Replication `a` specified by document `b`: x"},
		{"", "db_not_found: looks typed but is not", 500, "error", "db_not_found: looks typed but is not"},
		{"max_backoff", "max_backoff: too many retries", 500, "max_backoff", "too many retries"},
		{"unauthorized", "unauthorized: unauthorized to access or create database http://h/db/", 401, "unauthorized", "unauthorized to access or create database http://h/db/"},
		{"forbidden", "forbidden: forbidden to access database http://h/db/", 403, "forbidden", "forbidden to access database http://h/db/"},
		{"filter_fetch_error", "filter_fetch_error: Couldn't open document `_design/f`", 404, "not_found", "Couldn't open document `_design/f`"},
	}
	for _, tt := range tests {
		r := &Record{ErrorKind: tt.kind, StateInfo: ErrorInfo(tt.info)}
		if e := r.Failure(); e.Status != tt.status || e.Err != tt.name || e.Reason != tt.reason {
			t.Errorf("Failure(%q, %q) = %d %q, %q; want %d %q, %q", tt.kind, tt.info, e.Status, e.Err, e.Reason, tt.status, tt.name, tt.reason)
		}
	}
}

func TestSummarize(t *testing.T) {
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://h/a/"}, Target: parse.Endpoint{URL: "http://h/b/"}}
	running := New(rep, "x/_replicator", "u1", "d\"1", time.Unix(1, 0))
	running.RepID, running.State = "abc+continuous", Running
	transient := New(rep, "", "", "", time.Unix(1, 0))
	for _, rec := range []*Record{running, transient, NewFailed("_replicator", "u", "bad", "reason", time.Unix(1, 0))} {
		got, ok := Summarize(rec.Encode(testKeys))
		if !ok || got != rec.Summary() {
			t.Errorf("Summarize(%s) = %+v, %v; want %+v", rec.Encode(testKeys), got, ok, rec.Summary())
		}
	}
	// Only top-level members count.
	got, ok := Summarize([]byte(`{"rep":{"doc_id":"x","state":"failed"},"job_history":[{"rep_id":"y"}],"state":"running"}`))
	if !ok || got != (Summary{State: Running}) {
		t.Errorf("nested members read: %+v, %v", got, ok)
	}
	if _, ok := Summarize([]byte(`{"doc_id":"x"}`)); ok {
		t.Error("a record without a state summarized")
	}
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	q, rep := testQueue(t)
	var err error
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		if err := tx.Add(JobType, "good", New(rep, "", "", "", time.Unix(1, 0)).Encode(testKeys), time.Time{}); err != nil {
			return err
		}
		return tx.Add(JobType, "bad", []byte("{not json"), time.Time{})
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
