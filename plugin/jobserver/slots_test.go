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
	"github.com/couchepi/couchepi/plugin/jobdata"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/park"
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
	q, err := jobs.New(store, jobs.Options{Prefix: jobdata.QueuePrefix, Tag: jobdata.ShareTag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	waker := park.New(park.Options{Queue: q, LocalURL: "http://127.0.0.1:5984/"})
	if err := waker.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(waker.Stop)
	cfg := DefaultConfig()
	cfg.MaxJobs = maxJobs
	return New(Options{Queue: q, Parker: testParker{waker}}, cfg), waker
}

// TestSlots: max_jobs bounds the jobs holding a slot; a job that finds
// every slot held waits in line and closes the contended channel (which
// makes caught-up gated jobs hand theirs on); a slot handed back goes to
// the oldest waiter; at most max_jobs jobs stay quiet, the one quiet the
// longest is parked first.
func TestSlots(t *testing.T) {
	// Steps: "hold a" (a job accepted into a free slot), "quiet a" (a
	// gated job holding no slot), "wait a" (a's replication asks for a
	// slot), "release a" (a hands its slot on), "cancel a" (a stops
	// waiting), "max n" (max_jobs changed at runtime).
	type step struct {
		do string
		// want: holders and waiters (in line order), "holding|waiting";
		// contended: the channel is closed; parked: jobs stopped to park.
		want      string
		contended bool
		parked    string
	}
	tests := []struct {
		name    string
		maxJobs int
		steps   []step
	}{
		{"a free slot is taken at once", 2, []step{
			{"hold a", "a|", false, ""},
			{"quiet b", "a|", false, ""},
			{"wait b", "a b|", false, ""},
		}},
		{"every slot held: wait, contended, granted on release", 1, []step{
			{"hold a", "a|", false, ""},
			{"quiet b", "a|", false, ""},
			{"wait b", "a|b", true, ""},
			{"release a", "b|", false, ""},
		}},
		// With max_jobs 1, a second quiet job (waiting or not) is one too
		// many: the quiet one not waiting parks.
		{"waiters are served in line order", 1, []step{
			{"hold a", "a|", false, ""},
			{"quiet b", "a|", false, ""},
			{"quiet c", "a|", false, ""},
			{"wait b", "a|b", true, ""},
			{"wait c", "a|b c", true, ""},
			{"release a", "b|c", true, "a"},
			{"release b", "c|", false, "a"},
		}},
		{"a waiter that gives up leaves the line", 1, []step{
			{"hold a", "a|", false, ""},
			{"quiet b", "a|", false, ""},
			{"wait b", "a|b", true, ""},
			{"cancel b", "a|", false, ""},
			{"release a", "|", false, "b"},
		}},
		{"a lowered max_jobs holds: no slot given while as many are held", 2, []step{
			{"hold a", "a|", false, ""},
			{"hold b", "a b|", false, ""},
			{"quiet c", "a b|", false, ""},
			{"wait c", "a b|c", true, ""},
			{"max 1", "a b|c", true, ""},
			{"release a", "b|c", true, "a"},
			{"release b", "c|", false, "a"},
		}},
		{"a raised max_jobs serves waiters at once", 1, []step{
			{"hold a", "a|", false, ""},
			{"quiet b", "a|", false, ""},
			{"quiet c", "a|", false, ""},
			{"wait b", "a|b", true, ""},
			{"wait c", "a|b c", true, ""},
			{"max 3", "a b c|", false, ""},
		}},
		{"beyond max_jobs quiet jobs, the one quiet the longest parks", 2, []step{
			{"hold a", "a|", false, ""},
			{"hold b", "a b|", false, ""},
			{"quiet q1", "a b|", false, ""},
			{"quiet q2", "a b|", false, ""},
			{"release a", "b|", false, "q1"},
			{"release b", "|", false, "q1 q2"},
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
				case "hold", "quiet":
					w := &worker{s: s, job: &jobs.Job{ID: name}, exited: make(chan struct{}), continuous: true}
					w.gate = &gate{s: s, w: w}
					clock = clock.Add(time.Second)
					s.mu.Lock()
					s.workers[name] = w
					if op == "hold" {
						s.holdLocked(w)
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
				case "release":
					clock = clock.Add(time.Second)
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
					t.Fatalf("step %d (%s): holding|waiting = %q, want %q", i, st.do, got, st.want)
				}
				if got := isClosed(s); got != st.contended {
					t.Fatalf("step %d (%s): contended = %v, want %v", i, st.do, got, st.contended)
				}
				var parked []string
				for n, w := range ws {
					if errors.Is(w.stopCause(), errPark) {
						parked = append(parked, n)
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

// slotState is "holders|waiters": holders sorted, waiters in line order.
func slotState(s *Server) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var holding, waiting []string
	n := 0
	for id, w := range s.workers {
		if w.holding {
			holding = append(holding, id)
			n++
		}
	}
	if n != s.active {
		return fmt.Sprintf("active count %d but holders %v", s.active, holding)
	}
	slices.Sort(holding)
	for _, wt := range s.waiters {
		waiting = append(waiting, wt.w.job.ID)
	}
	return strings.Join(holding, " ") + "|" + strings.Join(waiting, " ")
}

// isClosed reports whether the server's contended channel is closed.
func isClosed(s *Server) bool {
	s.mu.Lock()
	ch := s.contended
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	default:
		return false
	}
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
