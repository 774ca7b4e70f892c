package jobserver

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// newerData is rec as a newer version would store it: a newer format,
// endpoints sealed in a way this version cannot open, a member it does
// not know.
func newerData(t *testing.T, rec *jobdata.Record, id string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(rec.Encode(testKeys, id), &m); err != nil {
		t.Fatal(err)
	}
	m["format"] = json.RawMessage(strconv.Itoa(jobdata.Format + 1))
	m["rep"] = json.RawMessage(`{"continuous":true,"sealed_endpoints":"s9.0123456789ab.c2VhbGVk"}`)
	m["added_by_next_version"] = json.RawMessage(`"kept"`)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNewerRecordLeftAlone (issue 39 item 5): a job whose record a newer
// version wrote is given back as it is, pending again after an interval
// for a node of that version, instead of being finished as undecodable
// or rewritten in this version's format.
func TestNewerRecordLeftAlone(t *testing.T) {
	ctx := context.Background()
	s := queueServer(t)
	data := newerData(t, testRecord("d1"), "job1")
	if err := s.q.Add(ctx, jobdata.JobType, "job1", data, jobstore.AddedTime()); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	job, err := s.q.Accept(actx, jobdata.JobType, jobs.AcceptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	newWorker(s, job, nil).run()
	st, err := s.q.GetState(ctx, jobdata.JobType, "job1")
	if err != nil || st != jobs.Pending {
		t.Fatalf("state %s %v, want pending", st, err)
	}
	got, err := s.q.GetData(ctx, jobdata.JobType, "job1")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("record rewritten:\n got %s\nwant %s", got, data)
	}
	// Not due before an interval: this node does not take it back at once.
	nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
	defer ncancel()
	if _, err := s.q.Accept(nctx, jobdata.JobType, jobs.AcceptOptions{NoWait: true}); err != jobs.ErrNotFound {
		t.Fatalf("accept right after: %v, want ErrNotFound", err)
	}
	// Monitoring shows it, without its endpoints.
	rec, err := s.recs.Get(ctx, "job1")
	if err != nil || rec.DocID != "d1" || rec.State != jobdata.Pending || rec.Rep != nil {
		t.Fatalf("shown record %+v %v", rec, err)
	}
}

// TestDuplicateOfNewerRecord: a replication id held by a live job whose
// record a newer version wrote is still a duplicate.
func TestDuplicateOfNewerRecord(t *testing.T) {
	s := queueServer(t)
	repID := parse.RepID{Base: "b9691fedaee4243ba089bca27b0feb4d", Ext: "+continuous"}
	owner := testRecord("first")
	owner.RepID, owner.State = repID.String(), jobdata.Running
	putOwner(t, s, repID, newerData(t, owner, "owner"))
	job, rec := acceptJob(t, s, "second", testRecord("second"))
	dup, err := newWorker(s, job, nil).markRunning(rec, repID, "<0.1.0>", time.Now())
	if err != nil || dup == nil || dup.jobID != "owner" || dup.rec.DocID != "first" {
		t.Fatalf("duplicate %+v %v, want the newer owner", dup, err)
	}
}
