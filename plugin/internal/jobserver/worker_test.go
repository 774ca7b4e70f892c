package jobserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// TestRecordedFailureAnswer: a failure recorded in a job (its kind and
// reason, as crash records them) is answered by POST /_replicate with the
// status and error the replicate.Error it came from carries.
func TestRecordedFailureAnswer(t *testing.T) {
	for _, kind := range []string{"unauthorized", "forbidden", "filter_fetch_error", "db_not_found", "nxdomain", "changes_req_failed", maxBackoff} {
		err := &replicate.Error{Kind: kind, Reason: "what failed"}
		rec := &jobdata.Record{ErrorKind: errorKind(err), StateInfo: jobdata.ErrorInfo(err.Error())}
		status, gotName, gotReason := rec.Failure()
		name, reason := err.CouchError()
		if status != err.HTTPStatus() || gotName != name || gotReason != reason {
			t.Errorf("%s: recorded failure answers %d %s %q; the error itself %d %s %q", kind, status, gotName, gotReason, err.HTTPStatus(), name, reason)
		}
	}
}

// TestErrorKind: the kind comes from a typed replicate.Error, wrapped or
// not, never from the text of an untyped error.
func TestErrorKind(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&replicate.Error{Kind: maxBackoff, Reason: "gave up"}, maxBackoff},
		{fmt.Errorf("run: %w", &replicate.Error{Kind: "db_not_found", Reason: "x"}), "db_not_found"},
		{errors.New("max_backoff: only looks typed"), ""},
		{errors.New("plain"), ""},
	}
	for _, tt := range tests {
		if got := errorKind(tt.err); got != tt.want {
			t.Errorf("errorKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestMaxBackoffRep: after a max_backoff failure the next run asks less of
// the endpoints; after any other failure the settings are the doc's.
func TestMaxBackoffRep(t *testing.T) {
	rep := &parse.Rep{CheckpointInterval: 30000, WorkerProcesses: 4, WorkerBatchSize: 500, HTTPConnections: 20}
	for _, kind := range []string{maxBackoff, "db_not_found", ""} {
		rec := &jobdata.Record{Rep: rep, ErrorKind: kind, LastError: "max_backoff: text alone does not count"}
		got := maxBackoffRep(rec)
		lowered := got.CheckpointInterval == 5000 && got.WorkerProcesses == 2 && got.WorkerBatchSize == 100 && got.HTTPConnections == 2
		if lowered != (kind == maxBackoff) {
			t.Errorf("kind %q: rep = %+v, lowered = %v", kind, got, lowered)
		}
		if rep.WorkerProcesses != 4 {
			t.Fatalf("kind %q: maxBackoffRep changed the record's own rep", kind)
		}
	}
}

// TestUnreadableRecordGivenBack: a job whose record is sealed with a key
// this node does not hold is given back to the queue untouched, for a node
// that has the key, not finished (which would lose it).
func TestUnreadableRecordGivenBack(t *testing.T) {
	s, _ := slotServer(t, 10)
	ctx := context.Background()
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://h/a/"}, Target: parse.Endpoint{URL: "http://h/b/"}}
	data := jobdata.New(rep, "_replicator", "u", "doc", time.Unix(1, 0)).Encode(seal.NewKeyring(seal.RandomKey()), "j1")
	if err := s.q.SetTypeTimeout(ctx, jobdata.JobType, TypeTimeout); err != nil {
		t.Fatal(err)
	}
	if err := s.q.Add(ctx, jobdata.JobType, "j1", data, jobstore.AddedTime()); err != nil {
		t.Fatal(err)
	}
	sub, _, _, err := s.q.Subscribe(ctx, jobdata.JobType, "j1")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := s.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(ctx) })
	var seen []jobs.State
	for len(seen) < 2 {
		select {
		case ev := <-sub.Events():
			seen = append(seen, ev.State)
		case <-time.After(10 * time.Second):
			t.Fatalf("events %v: the job was not accepted and settled", seen)
		}
	}
	if seen[0] != jobs.Running || seen[1] != jobs.Pending {
		t.Fatalf("events %v, want running then pending", seen)
	}
	if got, err := s.q.GetData(ctx, jobdata.JobType, "j1"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the record changed: %v", err)
	}
	if n, err := s.q.PendingCount(ctx, jobdata.JobType, time.Now(), 10); err != nil || n != 0 {
		t.Fatalf("the job is due again at once (%d due, %v): it would be accepted in a loop", n, err)
	}
}

// TestTamperedRecordNotRun (issue 38 item 7): a non-admin's job whose
// stored user_ctx was made an admin's by a write to the store without the
// key is not run with those rights: its sealed endpoints no longer open,
// and the job is finished as undecodable.
func TestTamperedRecordNotRun(t *testing.T) {
	s, _ := slotServer(t, 10)
	ctx := context.Background()
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, Target: parse.Endpoint{URL: "http://127.0.0.1:1/b/"},
		Continuous: true, UserCtx: parse.UserCtx{Name: "bob", Roles: []string{"users"}}}
	data := jobdata.New(rep, "_replicator", "u", "doc", time.Unix(1, 0)).Encode(testKeys, "j1")
	tampered := bytes.Replace(data, []byte(`"roles":["users"]`), []byte(`"roles":["users","_admin"]`), 1)
	if bytes.Equal(tampered, data) {
		t.Fatalf("no user_ctx roles in %s", data)
	}
	if err := s.q.SetTypeTimeout(ctx, jobdata.JobType, TypeTimeout); err != nil {
		t.Fatal(err)
	}
	if err := s.q.Add(ctx, jobdata.JobType, "j1", tampered, jobstore.AddedTime()); err != nil {
		t.Fatal(err)
	}
	sub, _, _, err := s.q.Subscribe(ctx, jobdata.JobType, "j1")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := s.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(ctx) })
	var seen []jobs.State
	for len(seen) < 2 {
		select {
		case ev := <-sub.Events():
			seen = append(seen, ev.State)
		case <-time.After(10 * time.Second):
			t.Fatalf("events %v: the job was not accepted and settled", seen)
		}
	}
	if seen[0] != jobs.Running || seen[1] != jobs.Finished {
		t.Fatalf("events %v, want running then finished (never run)", seen)
	}
}

// testKeys seals the job records of these tests.
var testKeys = seal.NewKeyring(seal.RandomKey())
