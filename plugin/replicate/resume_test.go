package replicate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestResume: a run started from the hint a parked run left reads only
// the source's checkpoint before replicating, and falls back to a full
// start whenever that checkpoint is not the one the hint was left at.
func TestResume(t *testing.T) {
	const uuid = "0123456789abcdef0123456789abcdef"
	cases := []struct {
		name string
		// meanwhile runs between the parked run and the resumed one, after
		// 10 more docs are added to the source.
		meanwhile func(t *testing.T, s *testServer, src, tgt string, run func(context.Context, Options) error)
		resumed   bool // the resumed run skips the full start
		fetched   int  // revisions the resumed run reads from the source
		want      int  // docs in the target at the end
	}{
		{name: "confirmed", resumed: true, fetched: 10, want: 60},
		{
			// Another run checkpoints further: the hint's revision is stale.
			name: "checkpointed by another run",
			meanwhile: func(t *testing.T, s *testServer, src, tgt string, run func(context.Context, Options) error) {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- run(ctx, Options{}) }()
				waitDocCount(t, s, tgt, 60)
				cancel()
				if err := <-done; !errors.Is(err, ErrStopped) {
					t.Fatalf("run in between: %v", err)
				}
				addDocs(t, s, src, 60, 65)
			},
			fetched: 5, want: 65,
		},
		{
			// The source deleted and recreated with other docs: its
			// checkpoint is gone, and only a full start sees that the
			// replication must begin again from 0.
			name: "source recreated",
			meanwhile: func(t *testing.T, s *testServer, src, tgt string, run func(context.Context, Options) error) {
				s.mustDo(t, "DELETE", src, nil)
				s.mustDo(t, "PUT", src, nil)
				docs := []map[string]any{}
				for i := range 3 {
					docs = append(docs, map[string]any{"_id": fmt.Sprintf("new%d", i)})
				}
				s.bulk(t, src, true, docs...)
			},
			fetched: 3, want: 53, // the 10 added before the delete went with it
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, p, rep, src, tgt := continuousThroughProxy(t, 50)
			id, err := ComputeRepID(context.Background(), rep, uuid, nil)
			if err != nil {
				t.Fatal(err)
			}
			group := new(Group)
			run := func(ctx context.Context, o Options) error {
				o.ServerUUID, o.RepID, o.Group = uuid, &id, group
				_, err := Run(ctx, rep, o)
				return err
			}

			var hint *Resume
			if err := run(context.Background(), Options{IdleAfter: 500 * time.Millisecond, OnResume: func(h *Resume) { hint = h }}); !errors.Is(err, ErrIdle) {
				t.Fatalf("first run: %v, want ErrIdle", err)
			}
			if hint == nil {
				t.Fatal("a run parked with its checkpoint written left no Resume")
			}
			addDocs(t, s, src, 50, 60)
			if tc.meanwhile != nil {
				tc.meanwhile(t, s, src, tgt, run)
			}

			p.resetCounts()
			resumes := group.Stats().Resumes
			var again *Resume
			if err := run(context.Background(), Options{IdleAfter: 500 * time.Millisecond, Resume: hint, OnResume: func(h *Resume) { again = h }}); !errors.Is(err, ErrIdle) {
				t.Fatalf("resumed run: %v, want ErrIdle", err)
			}
			waitDocCount(t, s, tgt, tc.want)
			p.mu.Lock()
			counts := fmt.Sprint(p.counts)
			read := p.counts["GET "+id.Base] // the checkpoint docs
			p.mu.Unlock()
			if got := group.Stats().Resumes - resumes; got != map[bool]int64{true: 1, false: 0}[tc.resumed] {
				t.Errorf("%d resumed starts, want resumed %v (requests %s)", got, tc.resumed, counts)
			}
			// Resumed: the source's checkpoint only; else both, the
			// source's read once.
			if want := map[bool]int{true: 1, false: 2}[tc.resumed]; read != want {
				t.Errorf("%d checkpoint reads, want %d (requests %s)", read, want, counts)
			}
			if got := p.fetched(); got != tc.fetched {
				t.Errorf("fetched %d revisions from the source, want %d (requests %s)", got, tc.fetched, counts)
			}
			if again == nil || string(again.Seq()) == string(hint.Seq()) {
				t.Errorf("the resumed run left %v, want a hint at its own checkpoint (was %s)", again, hint.Seq())
			}

			// Whatever the start, the checkpoints agree: a full start
			// from them reads nothing again.
			p.resetCounts()
			if err := run(context.Background(), Options{IdleAfter: 500 * time.Millisecond}); !errors.Is(err, ErrIdle) {
				t.Fatalf("last run: %v", err)
			}
			if got := p.fetched(); got != 0 {
				t.Errorf("a full start after the resumed run fetched %d revisions, want 0", got)
			}
		})
	}
}

// idleSlot is a Slot never asked for, whose source never signals: a run
// holding it reads on its continuous feed unless it reads in rounds.
type idleSlot struct{ never chan struct{} }

func (s idleSlot) Yield() <-chan struct{}            { return s.never }
func (s idleSlot) Next() (<-chan struct{}, bool)     { return s.never, true }
func (s idleSlot) Release()                          {}
func (s idleSlot) Acquire(ctx context.Context) error { return nil }

// TestWokenReadsRounds: a woken run reads its first changes with a normal
// request (shareable with the runs of the same source woken by the same
// write), not on a continuous feed of its own; an unwoken one opens its
// feed at once.
func TestWokenReadsRounds(t *testing.T) {
	for _, woken := range []bool{true, false} {
		t.Run(fmt.Sprint("woken=", woken), func(t *testing.T) {
			s, p, rep, _, tgt := continuousThroughProxy(t, 5)
			var mu sync.Mutex
			var feeds []string
			p.setFaults(func(n int, r *http.Request, body []byte) fault {
				if strings.HasSuffix(r.URL.Path, "/_changes") {
					mu.Lock()
					feeds = append(feeds, r.URL.Query().Get("feed"))
					mu.Unlock()
				}
				return passThrough
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef", Slot: idleSlot{make(chan struct{})}, Woken: woken})
				done <- err
			}()
			waitDocCount(t, s, tgt, 5)
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			want := "continuous"
			if woken {
				want = "normal"
			}
			if len(feeds) == 0 || feeds[0] != want {
				t.Errorf("_changes feeds requested %v, want the first %s", feeds, want)
			}
		})
	}
}

// TestResumeKeepsAdaptive (issue 40): a run resumed from a parked run's
// hint goes on with that run's adaptive choices: it skips _revs_diff, as
// the parked run had learnt to (every revision was missing), instead of
// asking it again for its first batches as a new run does.
func TestResumeKeepsAdaptive(t *testing.T) {
	const uuid = "0123456789abcdef0123456789abcdef"
	s, p, rep, src, tgt := continuousThroughProxy(t, 30)
	rep.WorkerBatchSize = 1 // a batch, and a _revs_diff, per doc
	id, err := ComputeRepID(context.Background(), rep, uuid, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func(o Options) error {
		o.ServerUUID, o.RepID = uuid, &id
		_, err := Run(context.Background(), rep, o)
		return err
	}
	var hint *Resume
	if err := run(Options{IdleAfter: 500 * time.Millisecond, OnResume: func(h *Resume) { hint = h }}); !errors.Is(err, ErrIdle) {
		t.Fatalf("first run: %v, want ErrIdle", err)
	}
	if hint == nil {
		t.Fatal("no Resume left")
	}
	addDocs(t, s, src, 30, 40)
	p.resetCounts()
	if err := run(Options{IdleAfter: 500 * time.Millisecond, Resume: hint}); !errors.Is(err, ErrIdle) {
		t.Fatalf("resumed run: %v, want ErrIdle", err)
	}
	waitDocCount(t, s, tgt, 40)
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.counts["POST _revs_diff"]; n > 1 {
		t.Errorf("the resumed run sent %d _revs_diff for 10 batches, want at most 1 (requests %v)", n, p.counts)
	}
}
