package jobserver

import (
	"context"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// queueServer is a job server, not started, on a queue in bbolt: the
// tests run its workers' steps themselves.
func queueServer(t *testing.T) *Server {
	t.Helper()
	s, _ := slotServer(t, 10)
	if err := s.q.SetTypeTimeout(context.Background(), jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	return s
}

// acceptJob adds rec as job id to s's queue and accepts it, as an acceptor
// does before a worker runs it.
func acceptJob(t *testing.T, s *Server, id string, rec *jobdata.Record) (*jobs.Job, *jobdata.Record) {
	t.Helper()
	ctx := context.Background()
	if err := s.q.Transact(ctx, func(tx *jobs.Tx) error { return jobstore.Put(tx, testKeys, id, rec) }); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	job, err := s.q.Accept(actx, jobdata.JobType, jobs.AcceptOptions{})
	if err != nil || job.ID != id {
		t.Fatalf("accept: %v, %v", job, err)
	}
	got, err := jobdata.Decode(job.Data, testKeys, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	return job, got
}

func testRecord(docID string) *jobdata.Record {
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:5984/src/"}, Target: parse.Endpoint{URL: "http://127.0.0.1:5984/tgt/"}, Continuous: true}
	db := ""
	if docID != "" {
		db = "_replicator"
	}
	return jobdata.New(rep, db, "u1", docID, time.Unix(1, 0))
}

// TestCrash (issue #33 item 2): a `_replicate` job whose run crashes
// fails, whatever the reason (max_backoff included), and a lookup by id no
// longer finds it, as CouchDB 3.x removes it; a doc job crashes and stays.
// The server that ran it counts the crash.
func TestCrash(t *testing.T) {
	tests := []struct {
		name      string
		docID     string
		err       error
		wantState string
		wantFound bool
	}{
		{"transient, db_not_found", "", &replicate.Error{Kind: "db_not_found", Reason: "could not open http://127.0.0.1:5984/src/"}, jobdata.Failed, false},
		{"transient, max_backoff", "", &replicate.Error{Kind: maxBackoff, Reason: "max backoff reached"}, jobdata.Failed, false},
		{"doc, db_not_found", "d1", &replicate.Error{Kind: "db_not_found", Reason: "could not open http://127.0.0.1:5984/src/"}, jobdata.Crashing, true},
		{"doc, max_backoff", "d2", &replicate.Error{Kind: maxBackoff, Reason: "max backoff reached"}, jobdata.Crashing, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := queueServer(t)
			job, rec := acceptJob(t, s, "job1", testRecord(tt.docID))
			newWorker(s, job, nil).crash(rec, tt.err, time.Now())
			got, err := s.recs.Get(context.Background(), "job1")
			if err != nil {
				t.Fatal(err)
			}
			if got.State != tt.wantState || got.FoundByID() != tt.wantFound {
				t.Fatalf("after the crash: state %s, found by id %v; want %s, %v", got.State, got.FoundByID(), tt.wantState, tt.wantFound)
			}
			// Each server counts its own crashes (one server per subtest).
			if st := s.Stats(); st.Crashes != 1 {
				t.Fatalf("server stats %+v, want 1 crash", st)
			}
		})
	}
}

// TestDuplicateOfCrashingDoc (issue #33 item 4): a doc job whose
// replication id is held by another doc's job that is crashing (backing
// off) is a duplicate, as in CouchDB 3.x: the id stays with its owner.
func TestDuplicateOfCrashingDoc(t *testing.T) {
	for _, ownerState := range []string{jobdata.Pending, jobdata.Running, jobdata.Crashing, jobdata.Completed, jobdata.Failed} {
		t.Run(ownerState, func(t *testing.T) {
			s := queueServer(t)
			repID := parse.RepID{Base: "b9691fedaee4243ba089bca27b0feb4d", Ext: "+continuous"}
			owner := testRecord("first")
			owner.RepID, owner.State = repID.String(), ownerState
			putOwner(t, s, repID, owner.Encode(testKeys, "owner"))
			job, rec := acceptJob(t, s, "second", testRecord("second"))
			dup, err := newWorker(s, job, nil).markRunning(rec, repID, "<0.1.0>", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if wantDup := ownerState != jobdata.Completed && ownerState != jobdata.Failed; (dup != nil) != wantDup || dup != nil && dup.jobID != "owner" {
				t.Fatalf("owner %s: duplicate %+v, want one: %v", ownerState, dup, wantDup)
			}
		})
	}
}

// putOwner adds job "owner" with data, parked, as the owner of repID.
func putOwner(t *testing.T, s *Server, repID parse.RepID, data []byte) {
	t.Helper()
	err := s.q.Transact(context.Background(), func(tx *jobs.Tx) error {
		if err := tx.Add(jobdata.JobType, "owner", data, jobstore.ParkedTime()); err != nil {
			return err
		}
		jobstore.SetRepIDOwner(tx.KV(), repID.String(), "owner")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
