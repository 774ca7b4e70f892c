package jobserver

import (
	"context"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// TestReclaimUndecodable: at start, the jobs a dead process left running
// are re-enqueued; one whose record does not decode (an older version's,
// or damaged) is re-enqueued as it is rather than failing the start of
// the server, and so of every other job.
func TestReclaimUndecodable(t *testing.T) {
	s, _ := slotServer(t, 0) // max_jobs 0: the re-enqueued jobs stay pending
	ctx := context.Background()
	good := jobdata.New(&parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, Target: parse.Endpoint{URL: "http://127.0.0.1:1/b/"}}, "_replicator", "uuid", "good", time.Now())
	good.State = jobdata.Running
	if err := s.q.SetTypeTimeout(ctx, jobdata.JobType, TypeTimeout); err != nil {
		t.Fatal(err)
	}
	for id, data := range map[string][]byte{"good": good.Encode(testKeys, "good"), "bad": []byte(`{"rep":`)} {
		if err := s.q.Add(ctx, jobdata.JobType, id, data, jobstore.AddedTime()); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := s.q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{NoWait: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(ctx, true); err != nil {
		t.Fatalf("start with an undecodable running job: %v", err)
	}
	t.Cleanup(func() { s.Stop(ctx) })
	for _, id := range []string{"good", "bad"} {
		if st, err := s.q.GetState(ctx, jobdata.JobType, id); err != nil || st != jobs.Pending {
			t.Errorf("%s: %v %v, want pending", id, st, err)
		}
	}
	rec, err := jobstore.Records{Q: s.q, Keys: testKeys}.Get(ctx, "good")
	if err != nil || rec.State != jobdata.Pending || len(rec.History) == 0 || rec.History[0].Reason != "node restarted" {
		t.Errorf("good job after start: %+v %v", rec, err)
	}
}
