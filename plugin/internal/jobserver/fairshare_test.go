package jobserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

func TestChoose(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	busy := NewShare() // "a" ran 4 jobs for a whole interval, "b" one
	cfg := DefaultConfig()
	busy.Cycle([]ShareJob{{"a1", "a", time.Second}, {"a2", "a", time.Second}, {"a3", "a", time.Second}, {"a4", "a", time.Second}, {"b1", "b", time.Second}}, time.Second, cfg)
	cands := func(tags ...string) []jobs.Candidate {
		out := make([]jobs.Candidate, len(tags))
		for i, tag := range tags {
			out[i] = jobs.Candidate{ID: fmt.Sprintf("%s-%d", tag, i), Tag: tag}
		}
		return out
	}
	withSTime := func(c []jobs.Candidate, st ...time.Time) []jobs.Candidate {
		for i := range st {
			c[i].STime = st[i]
		}
		return c
	}
	tests := []struct {
		name    string
		cands   []jobs.Candidate
		share   *Share
		running map[string]int
		shares  map[string]int
		want    int
	}{
		{"one candidate", cands("a"), busy, map[string]int{"a": 4}, nil, 0},
		{"lower usage first", cands("a", "b"), busy, map[string]int{"a": 4, "b": 1}, nil, 1},
		{"lower usage first, either order", cands("b", "a"), busy, map[string]int{"a": 4, "b": 1}, nil, 0},
		{"unknown key has no usage", cands("a", "b", "c"), busy, map[string]int{"a": 4, "b": 1}, nil, 2},
		{"more shares outweigh usage", cands("a", "b"), busy, map[string]int{"a": 4, "b": 1}, map[string]int{"a": 1000}, 0},
		{"no usage: fewer running jobs", cands("a", "b"), NewShare(), map[string]int{"a": 2, "b": 1}, nil, 1},
		{"no usage: fewer running jobs per share", cands("a", "b"), NewShare(), map[string]int{"a": 5, "b": 1}, map[string]int{"a": 1000}, 0},
		{"tie: oldest stime", withSTime(cands("a", "b", "c"), t0.Add(time.Second), t0, t0.Add(time.Second)), NewShare(), nil, nil, 1},
		{"tie: zero stime is oldest", withSTime(cands("a", "b"), t0), NewShare(), nil, nil, 1},
		{"full tie: first", cands("a", "b"), NewShare(), nil, nil, 0},
		{"no candidates", nil, NewShare(), nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			for k, v := range tt.shares {
				c.Shares[k] = v
			}
			if got := Choose(tt.cands, tt.share, tt.running, c); got != tt.want {
				t.Fatalf("Choose = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestServerChooseFollowsConfig: [replicator.shares] changed at runtime
// changes the acceptors' pick at once.
func TestServerChooseFollowsConfig(t *testing.T) {
	s := New(Options{}, DefaultConfig())
	for _, w := range []struct{ id, key string }{{"a1", "a/_replicator"}, {"a2", "a/_replicator"}, {"b1", "b/_replicator"}, {"b0", "b/_replicator"}} {
		s.workers[w.id] = &worker{key: w.key}
		s.holdLocked(s.workers[w.id])
	}
	s.releaseLocked(s.workers["b0"]) // held and given back: counts no more
	cands := []jobs.Candidate{{ID: "a3", Tag: "a/_replicator"}, {ID: "b2", Tag: "b/_replicator"}}
	if got := s.choose(cands); got != 1 {
		t.Fatalf("equal shares: picked %d, want 1 (b runs fewer jobs)", got)
	}
	cfg, err := ParseConfig(nil, map[string]string{"a/_replicator": "1000"})
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(cfg)
	if got := s.choose(cands); got != 0 {
		t.Fatalf("a has 1000 shares: picked %d, want 0", got)
	}
}

// TestFairShareSlots runs the job server's scheduling policy (Share.Cycle,
// Trim, ExtraAcceptors and Choose, the functions Server.Cycle and its
// acceptors use) against a real queue on a simulated clock: replicator db
// "big/_replicator" has 24 continuous docs, "small/_replicator" 3, and
// max_jobs is 4. Random picks would give small about 3/27 of the run
// time; fair share gives it its share of the slots.
func TestFairShareSlots(t *testing.T) {
	tests := []struct {
		name               string
		shares             map[string]string
		random             bool    // accept at random, as before fair share chose
		minSmall, maxSmall float64 // bounds of small's fraction of run time
	}{
		// Control: picking at random (only rotation is fair), small mostly waits.
		{"random pick", nil, true, 0, 0.25},
		// Equal shares: each db gets about half the slots.
		{"100 vs 100", nil, false, 0.35, 0.65},
		// The big db has 10× the shares: small gets about 1/11, and still runs.
		{"big 1000 vs 100", map[string]string{"big/_replicator": "1000"}, false, 0.03, 0.25},
		// The small db has 10× the shares: its 3 jobs run all the time
		// (3 of the up to max_jobs + max_churn = 6 running).
		{"small 1000 vs 100", map[string]string{"small/_replicator": "1000"}, false, 0.48, 0.51},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig(map[string]string{"max_jobs": "4", "max_churn": "2", "min_run_time_sec": "0", "interval_sec": "10"}, tt.shares)
			if err != nil {
				t.Fatal(err)
			}
			ran, runs := simulate(t, cfg, map[string]int{"big/_replicator": 200, "small/_replicator": 3}, 300, tt.random)
			total := ran["big/_replicator"] + ran["small/_replicator"]
			frac := float64(ran["small/_replicator"]) / float64(total)
			t.Logf("small db's fraction of run time %.3f (%d of %d job-cycles)", frac, ran["small/_replicator"], total)
			if frac < tt.minSmall || frac > tt.maxSmall {
				t.Fatalf("small db ran %.3f of the time, want %.2f..%.2f", frac, tt.minSmall, tt.maxSmall)
			}
			for id, n := range runs {
				if n == 0 && !tt.random {
					t.Fatalf("job %s never ran", id)
				}
			}
		})
	}
}

// simulate runs cycles scheduling intervals of a job server over the docs
// of each db (random: acceptors pick at random) and returns the job-cycles run per db and the runs per job.
func simulate(t *testing.T, cfg Config, docs map[string]int, cycles int, random bool) (map[string]int, map[string]int) {
	t.Helper()
	ctx := context.Background()
	q, err := jobs.New(kv.NewMemory(), jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, TypeTimeout); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	runs := map[string]int{}
	for db, n := range docs {
		for i := 0; i < n; i++ {
			rep, err := parse.ReplicationDoc([]byte(fmt.Sprintf(`{"source":"http://127.0.0.1:1/s%d","target":"http://127.0.0.1:1/t%d","continuous":true}`, i, i)), parse.UserCtx{}, parse.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			id := parse.PersistentJobID(db, fmt.Sprintf("doc%d", i))
			if err := q.Add(ctx, jobdata.JobType, id, jobdata.New(rep, db, db, fmt.Sprintf("doc%d", i), clock).Encode(testKeys, id), time.Time{}); err != nil {
				t.Fatal(err)
			}
			runs[id] = 0
		}
	}
	type running struct {
		job     *jobs.Job
		key     string
		started time.Time
	}
	share := NewShare()
	workers := map[string]*running{}
	ran := map[string]int{}
	for c := 0; c < cycles; c++ {
		// The interval passes: every worker ran through it.
		clock = clock.Add(cfg.Interval)
		var sj []ShareJob
		count := map[string]int{}
		for id, w := range workers {
			sj = append(sj, ShareJob{ID: id, Key: w.key, Ran: cfg.Interval})
			count[w.key]++
			ran[w.key]++
		}
		share.Cycle(sj, cfg.Interval, cfg)
		var list []Worker
		for id, w := range workers {
			list = append(list, Worker{ID: id, Continuous: true, Started: w.started, Priority: share.Priority(id, w.key, count[w.key], cfg)})
		}
		// Rotated jobs are due again one interval later, as the worker re-enqueues them.
		for _, id := range Trim(list, cfg.MaxJobs, cfg.MinRunTime, clock, false) {
			if err := q.Resubmit(ctx, workers[id].job, clock.Add(cfg.Interval), nil); err != nil {
				t.Fatal(err)
			}
			delete(workers, id)
		}
		extra := ExtraAcceptors(cfg.MaxJobs, cfg.MaxChurn, 0, 0, len(workers), cfg.MaxJobs+cfg.MaxChurn)
		extra += max(cfg.MaxJobs-len(workers), 0) // the standing acceptors fill free slots
		for i := 0; i < extra && len(workers) < cfg.MaxJobs+cfg.MaxChurn; i++ {
			count := map[string]int{}
			for _, w := range workers {
				count[w.key]++
			}
			opt := jobs.AcceptOptions{MaxSchedTime: clock, NoWait: true, Choose: func(c []jobs.Candidate) int {
				return Choose(c, share, count, cfg)
			}}
			if random {
				opt.Choose = nil
			}
			job, err := q.Accept(ctx, jobdata.JobType, opt)
			if err != nil {
				break // nothing due
			}
			rec, err := jobdata.Decode(job.Data, testKeys, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			workers[job.ID] = &running{job: job, key: rec.ShareKey(), started: clock}
			runs[job.ID]++
		}
	}
	return ran, runs
}

// TestChooseNext: the acceptors' pick for a many-job accept counts the
// jobs the accept took already as running, so one transaction's picks
// spread over the keys as that many single accepts would.
func TestChooseNext(t *testing.T) {
	a, b := "a/_replicator", "b/_replicator"
	cands := []jobs.Candidate{{ID: "a9", Tag: a}, {ID: "b9", Tag: b}}
	for _, tc := range []struct {
		name    string
		running map[string]int // held slots per key
		taken   []string       // keys of the jobs taken so far
		want    int
	}{
		{"nothing taken: fewer running", map[string]int{a: 2, b: 1}, nil, 1},
		{"taken count as running", map[string]int{a: 2, b: 1}, []string{b, b}, 0},
		{"even: the first offered", map[string]int{a: 1, b: 1}, []string{a, b}, 0},
		{"only taken", nil, []string{a}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{}, DefaultConfig())
			for key, n := range tc.running {
				for i := 0; i < n; i++ {
					w := &worker{key: key}
					s.workers[fmt.Sprintf("%s%d", key, i)] = w
					s.holdLocked(w)
				}
			}
			var taken []jobs.Candidate
			for i, key := range tc.taken {
				taken = append(taken, jobs.Candidate{ID: fmt.Sprint("t", i), Tag: key})
			}
			if got := s.chooseNext(cands, taken); got != tc.want {
				t.Fatalf("picked %d, want %d", got, tc.want)
			}
		})
	}
}
