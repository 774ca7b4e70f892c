package replicate

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// signalSlot is a Slot never asked for whose source's signal the test
// fires.
type signalSlot struct {
	mu    sync.Mutex
	ch    chan struct{}
	never chan struct{}
}

func newSignalSlot() *signalSlot {
	return &signalSlot{ch: make(chan struct{}), never: make(chan struct{})}
}

func (s *signalSlot) Yield() <-chan struct{} { return s.never }
func (s *signalSlot) Next() (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch, true
}
func (s *signalSlot) Release()                          {}
func (s *signalSlot) Acquire(ctx context.Context) error { return nil }

// fire signals a change of the source.
func (s *signalSlot) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

// TestFollowersReadRounds (issue 40): a gated run alone on its source
// reads a continuous feed; once a second run of the Group follows the
// same source, the first leaves its feed and both read in rounds on the
// source's signal, so that a write reaches both through normal _changes
// reads they share, not a continuous feed each (a fan-out's thousand
// feeds streamed every change a thousand times).
func TestFollowersReadRounds(t *testing.T) {
	cases := []struct {
		name           string
		runs           int
		wantContinuous bool // the write arrives on a continuous feed
	}{
		{"alone: its feed", 1, true},
		{"two followers: rounds", 2, false},
		{"five followers: rounds", 5, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, p, rep, src, tgt := continuousThroughProxy(t, 5)
			ps := p.endpointServer(s)
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
			pool := couchclient.NewPool(couchclient.PoolOptions{})
			t.Cleanup(func() { pool.Close() })
			group, slot := new(Group), newSignalSlot()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			t.Cleanup(func() { cancel(); wg.Wait() })
			tgts := []string{tgt}
			for i := range tc.runs {
				r := rep
				if i > 0 {
					tgts = append(tgts, s.newDB(t, "tgt"))
					r = testRep(ps, src, tgts[i])
					r.Continuous = true
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					Run(ctx, r, Options{ServerUUID: "0123456789abcdef0123456789abcdef", Pool: pool, Group: group, Slot: slot})
				}()
				// The first one is on its feed before the others come.
				waitDocCount(t, s, tgts[i], 5)
			}
			mu.Lock()
			feeds = nil
			mu.Unlock()
			addDocs(t, s, src, 5, 8)
			slot.fire()
			for _, db := range tgts {
				waitDocCount(t, s, db, 8)
			}
			mu.Lock()
			defer mu.Unlock()
			normal := 0
			for _, f := range feeds {
				if f == "normal" {
					normal++
				}
			}
			if got := normal == 0; got != tc.wantContinuous {
				t.Errorf("_changes requests for the write: %v; want it delivered on a continuous feed: %v", feeds, tc.wantContinuous)
			}
			if !tc.wantContinuous && normal > 2 {
				t.Errorf("%d followers read the write with %d normal _changes requests, want at most 2", tc.runs, normal)
			}
		})
	}
}
