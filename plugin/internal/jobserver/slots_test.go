package jobserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/park"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// testParker is the Waker as a Parker, as the plugin's main wires it.
type testParker struct{ *park.Waker }

func (p testParker) Watch(ep parse.Endpoint, rep *parse.Rep) SourceWatch {
	if w := p.Waker.Watch(ep, rep); w != nil {
		return w
	}
	return nil
}

// slotServer is a job server with max_jobs slots whose jobs watch their
// sources through a Waker, both on a queue in bbolt. The server is not
// started: the tests drive its slots as the workers of gated
// replications do.
func slotServer(t *testing.T, maxJobs int) (*Server, *park.Waker) {
	t.Helper()
	store, err := kv.OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), kv.BoltOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	waker := park.New(park.Options{Queue: q, Keys: testKeys, LocalURL: "http://127.0.0.1:5984/"})
	if err := waker.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(waker.Stop)
	cfg := DefaultConfig()
	cfg.MaxJobs = maxJobs
	return New(Options{Queue: q, Keys: testKeys, Parker: testParker{waker}}, cfg), waker
}

// TestSlots: max_jobs bounds the jobs holding a slot; a job that finds
// every slot held waits in line, and for each waiting job one gated
// holder is asked for its slot, the one holding it the longest first; a
// slot handed back goes to the oldest waiter; at most max_jobs jobs stay
// quiet, the one quiet the longest is parked first.
func TestSlots(t *testing.T) {
	// Steps: "hold a" (a job accepted into a free slot), "quiet a" (a
	// gated job holding no slot), "wait a" (a's replication asks for a
	// slot), "release a" (a hands its slot on), "cancel a" (a stops
	// waiting), "max n" (max_jobs changed at runtime).
	type step struct {
		do string
		// want: "holders|waiters|asked": holders sorted, waiters in line
		// order, holders asked for their slot sorted; parked: jobs
		// stopped to park.
		want   string
		parked string
	}
	tests := []struct {
		name    string
		maxJobs int
		steps   []step
	}{
		{"a free slot is taken at once", 2, []step{
			{"hold a", "a||", ""},
			{"quiet b", "a||", ""},
			{"wait b", "a b||", ""},
		}},
		{"every slot held: wait, the holder is asked, granted on release", 1, []step{
			{"hold a", "a||", ""},
			{"quiet b", "a||", ""},
			{"wait b", "a|b|a", ""},
			{"release a", "b||", ""},
		}},
		{"one holder asked per waiter, the longest holding first", 3, []step{
			{"hold a", "a||", ""},
			{"hold b", "a b||", ""},
			{"hold c", "a b c||", ""},
			{"quiet d", "a b c||", ""},
			{"quiet e", "a b c||", ""},
			{"wait d", "a b c|d|a", ""},
			{"wait e", "a b c|d e|a b", ""},
			{"release b", "a c d|e|a", ""},
		}},
		// With max_jobs 1, a second quiet job (waiting or not) is one too
		// many: the quiet one not waiting parks.
		{"waiters are served in line order", 1, []step{
			{"hold a", "a||", ""},
			{"quiet b", "a||", ""},
			{"quiet c", "a||", ""},
			{"wait b", "a|b|a", ""},
			{"wait c", "a|b c|a", ""},
			{"release a", "b|c|b", "a"},
			{"release b", "c||", "a"},
		}},
		{"a waiter that gives up leaves the line", 1, []step{
			{"hold a", "a||", ""},
			{"quiet b", "a||", ""},
			{"wait b", "a|b|a", ""},
			{"cancel b", "a||a", ""},
			{"release a", "||", "b"},
		}},
		{"a lowered max_jobs holds: no slot given while as many are held", 2, []step{
			{"hold a", "a||", ""},
			{"hold b", "a b||", ""},
			{"quiet c", "a b||", ""},
			{"wait c", "a b|c|a", ""},
			{"max 1", "a b|c|a", ""},
			{"release a", "b|c|b", "a"},
			{"release b", "c||", "a"},
		}},
		{"a raised max_jobs serves waiters at once", 1, []step{
			{"hold a", "a||", ""},
			{"quiet b", "a||", ""},
			{"quiet c", "a||", ""},
			{"wait b", "a|b|a", ""},
			{"wait c", "a|b c|a", ""},
			{"max 3", "a b c||a", ""},
		}},
		// A job takes its slot when accepted, before its replication
		// (and gate) starts.
		{"a holder gated after taking its slot is asked then", 1, []step{
			{"hold- a", "a||", ""},
			{"quiet b", "a||", ""},
			{"wait b", "a|b|", ""},
			{"gate a", "a|b|a", ""},
			{"release a", "b||", ""},
		}},
		{"beyond max_jobs quiet jobs, the one quiet the longest parks", 2, []step{
			{"hold a", "a||", ""},
			{"hold b", "a b||", ""},
			{"quiet q1", "a b||", ""},
			{"quiet q2", "a b||", ""},
			{"release a", "b||", "q1"},
			{"release b", "||", "q1 q2"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := slotServer(t, tt.maxJobs)
			ws := map[string]*worker{}
			cancels := map[string]context.CancelFunc{}
			results := map[string]chan error{}
			clock := time.Now().Add(-time.Hour) // quiet before any release of the test
			for i, st := range tt.steps {
				op, name, _ := strings.Cut(st.do, " ")
				switch op {
				case "hold", "hold-", "quiet":
					w := &worker{s: s, job: &jobs.Job{ID: name}, exited: make(chan struct{}), continuous: true}
					if op != "hold-" { // hold-: not gated yet
						w.gate = &gate{s: s, w: w, yield: make(chan struct{}, 1)}
					}
					clock = clock.Add(time.Second)
					s.mu.Lock()
					s.workers[name] = w
					if op != "quiet" {
						s.holdLocked(w)
						w.heldSince = clock
					} else {
						w.quietSince = clock
					}
					s.mu.Unlock()
					ws[name] = w
				case "wait":
					ctx, cancel := context.WithCancel(context.Background())
					t.Cleanup(cancel)
					done := make(chan error, 1)
					go func() { done <- ws[name].gate.Acquire(ctx) }()
					cancels[name], results[name] = cancel, done
					waitFor(t, func() bool {
						s.mu.Lock()
						defer s.mu.Unlock()
						return ws[name].holding || slices.ContainsFunc(s.waiters, func(x *slotWaiter) bool { return x.w == ws[name] })
					})
				case "gate":
					s.mu.Lock()
					s.setGateLocked(ws[name], &gate{s: s, w: ws[name], yield: make(chan struct{}, 1)})
					s.mu.Unlock()
				case "release":
					ws[name].gate.Release()
				case "cancel":
					cancels[name]()
					if err := <-results[name]; !errors.Is(err, context.Canceled) {
						t.Fatalf("step %d: cancelled Acquire returned %v", i, err)
					}
				case "max":
					cfg := s.config()
					cfg.MaxJobs = int(name[0] - '0')
					s.SetConfig(cfg)
				}
				// A granted Acquire returns nil.
				for n, ch := range results {
					select {
					case err := <-ch:
						if err != nil {
							t.Fatalf("step %d: Acquire of %s: %v", i, n, err)
						}
						delete(results, n)
					default:
					}
				}
				if got := slotState(s); got != st.want {
					t.Fatalf("step %d (%s): holding|waiting|asked = %q, want %q", i, st.do, got, st.want)
				}
				var parked []string
				for n, w := range ws {
					if errors.Is(w.stopCause(), errPark) {
						parked = append(parked, n)
					}
					// An asked holder got a token on its yield channel.
					if s.mu.Lock(); w.asked && len(w.gate.yield) == 0 {
						s.mu.Unlock()
						t.Fatalf("step %d (%s): %s asked without a token", i, st.do, n)
					} else {
						s.mu.Unlock()
					}
				}
				slices.Sort(parked)
				if got := strings.Join(parked, " "); got != st.parked {
					t.Fatalf("step %d (%s): parked %q, want %q", i, st.do, got, st.parked)
				}
			}
		})
	}
}

// slotState is "holders|waiters|asked": holders sorted, waiters in line
// order, asked holders sorted.
func slotState(s *Server) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var holding, waiting, asked []string
	for id, w := range s.workers {
		if w.holding {
			holding = append(holding, id)
		}
		if w.asked {
			asked = append(asked, id)
		}
	}
	if len(holding) != s.active || len(asked) != s.asked {
		return fmt.Sprintf("counts: active %d, asked %d; holders %v, asked %v", s.active, s.asked, holding, asked)
	}
	slices.Sort(holding)
	slices.Sort(asked)
	for _, wt := range s.waiters {
		waiting = append(waiting, wt.w.job.ID)
	}
	return strings.Join(holding, " ") + "|" + strings.Join(waiting, " ") + "|" + strings.Join(asked, " ")
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlotWatch: a quiet job's signal, armed before it reads, fires on a
// write to its source (the host's db_updated) and not on a write to
// another db; a job whose source is not watchable is not gated.
func TestSlotWatch(t *testing.T) {
	s, waker := slotServer(t, 1)
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:5984/src"}, Target: parse.Endpoint{URL: "http://127.0.0.1:5984/tgt"},
		Continuous: true, UseCheckpoints: true}
	w := &worker{s: s, exited: make(chan struct{})}
	g := s.newGate(w, rep, s.config())
	if g == nil {
		t.Fatal("a continuous job reading a local db is not gated")
	}
	defer g.watch.Close()
	tests := []struct {
		name  string
		write string // the db written to
		fires bool
	}{
		{"write to another db", "other", false},
		{"write to the source", "src", true},
		{"write to the source again", "src", true},
	}
	for _, tt := range tests {
		ch, ok := g.Next()
		if !ok {
			t.Fatalf("%s: source not watchable", tt.name)
		}
		waker.DBUpdated(tt.write)
		select {
		case <-ch:
			if !tt.fires {
				t.Fatalf("%s: signal fired", tt.name)
			}
		case <-time.After(100 * time.Millisecond):
			if tt.fires {
				t.Fatalf("%s: signal did not fire", tt.name)
			}
		}
	}
	for _, c := range []struct {
		name string
		edit func(r *parse.Rep)
	}{
		{"one-shot", func(r *parse.Rep) { r.Continuous = false }},
		{"no checkpoints", func(r *parse.Rep) { r.UseCheckpoints = false }},
		{"no db in the source URL", func(r *parse.Rep) { r.Source.URL = "http://127.0.0.1:5984/" }},
	} {
		r := *rep
		c.edit(&r)
		if s.newGate(w, &r, s.config()) != nil {
			t.Errorf("%s: gated", c.name)
		}
	}
	cfg := s.config()
	cfg.IdlePark = 0
	if s.newGate(w, rep, cfg) != nil {
		t.Error("idle_park_sec = 0: gated")
	}
}

// TestSlotHoldersBounded: the queue of holders, read only while jobs
// wait, does not grow with every slot taken when none ever waits.
func TestSlotHoldersBounded(t *testing.T) {
	s, _ := slotServer(t, 2)
	var ws []*worker
	for _, name := range []string{"a", "b"} {
		w := &worker{s: s, job: &jobs.Job{ID: name}, exited: make(chan struct{}), continuous: true}
		w.gate = &gate{s: s, w: w, yield: make(chan struct{}, 1)}
		s.mu.Lock()
		s.workers[name] = w
		s.mu.Unlock()
		ws = append(ws, w)
	}
	for range 10_000 {
		for _, w := range ws {
			s.mu.Lock()
			s.holdLocked(w)
			s.mu.Unlock()
			w.gate.Release()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.holders); n > 2*len(s.workers)+64 {
		t.Errorf("%d holders queued after 20,000 holds of 2 workers", n)
	}
}

// TestWokenJobsBringAcceptors: accepting a job woken from parking (due at
// WokenTime) brings the acceptors up to wakeAcceptors, so that the other
// jobs the same write woke are accepted together; a new job does not.
func TestWokenJobsBringAcceptors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stime time.Time
		want  int
	}{
		{"woken", jobstore.WokenTime(), wakeAcceptors},
		{"added", jobstore.AddedTime(), DefaultConfig().MaxAcceptors},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := slotServer(t, 100)
			ctx := context.Background()
			if err := s.Start(ctx, false); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(ctx) })
			// Undecodable: its worker finishes it at once.
			if err := s.q.Add(ctx, jobdata.JobType, "j1", []byte("{"), tc.stime); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				st, err := s.q.GetState(ctx, jobdata.JobType, "j1")
				return err != nil || st == jobs.Finished
			})
			// Acceptors beyond max_acceptors leave only after waiting
			// 5 s for a job.
			acceptors := func() int {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.acceptors
			}
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && acceptors() != tc.want; {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			if got := acceptors(); got != tc.want {
				t.Errorf("%d acceptors after the job was accepted, want %d", got, tc.want)
			}
		})
	}
}
