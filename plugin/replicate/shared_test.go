package replicate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/hashicorp/go-hclog"
)

// TestSharedWindow: a source's window of recent changes serves any run
// whose since is in it; its end counts as the source's end only for a run
// armed with the same, still open, signal; reads that go on from the end
// extend it.
func TestSharedWindow(t *testing.T) {
	var cw changeWindows
	key := t.Name()
	rows := func(from, to int) []change {
		var out []change
		for i := from; i <= to; i++ {
			out = append(out, change{Seq: json.RawMessage(fmt.Sprint(i)), ID: fmt.Sprintf("d%d", i)})
		}
		return out
	}
	seq := func(i int) json.RawMessage { return json.RawMessage(fmt.Sprint(i)) }
	ch1, ch2, ch3, other := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	type get struct {
		since   int
		changed chan struct{}
		limit   int
		want    string // ids served, "miss" when since is not in the window
		atEnd   bool
	}
	steps := []struct {
		name string
		do   func()
		gets []get
	}{
		{"nothing kept", nil, []get{{0, ch1, 10, "miss", false}}},
		{"a read from 0 to the end", func() { cw.put(key, seq(0), rows(1, 3), ch1) }, []get{
			{0, ch1, 10, "d1 d2 d3", true},
			{2, ch1, 10, "d3", true},
			{3, ch1, 10, "", true},
			{0, ch1, 2, "d1 d2", false}, // more than the limit: not the end
			{3, other, 10, "", false},   // armed with another signal: read on
			{7, ch1, 10, "miss", false},
		}},
		{"the signal fired: the end is no longer the source's", func() { close(ch1) }, []get{
			{1, ch1, 10, "d2 d3", false},
		}},
		{"a read on from the end extends the window", func() { cw.put(key, seq(3), rows(4, 5), ch2) }, []get{
			{1, ch2, 10, "d2 d3 d4 d5", true},
			{5, ch2, 10, "", true},
		}},
		{"a read from inside the window changes nothing", func() { cw.put(key, seq(2), rows(3, 6), ch2) }, []get{
			{5, ch2, 10, "", true},
		}},
		{"a read from inside a stale window, armed after it went stale, is its new tail", func() {
			close(ch2)
			cw.put(key, seq(3), rows(4, 7), ch3)
		}, []get{
			{3, ch3, 10, "d4 d5 d6 d7", true},
			{1, ch3, 10, "d2 d3 d4 d5 d6 d7", true},
			{7, ch3, 10, "", true},
		}},
	}
	for _, st := range steps {
		if st.do != nil {
			st.do()
		}
		for _, g := range st.gets {
			got, atEnd, ok := cw.get(key, seq(g.since), g.changed, g.limit)
			var ids []string
			for _, c := range got {
				ids = append(ids, c.ID)
			}
			s := strings.Join(ids, " ")
			if !ok {
				s = "miss"
			}
			if s != g.want || atEnd != g.atEnd {
				t.Errorf("%s: get since %d: %q at end %v, want %q at end %v", st.name, g.since, s, atEnd, g.want, g.atEnd)
			}
		}
	}
}

// TestSharedDocs: a fetched revision is served by id and rev to runs of
// the same source, the oldest forgotten first beyond sharedDocs.
func TestSharedDocs(t *testing.T) {
	var sr sharedRevs
	src := t.Name()
	sr.put(revKey(src, "a", "1-x"), json.RawMessage(`{"_id":"a"}`))
	if doc, ok := sr.get(revKey(src, "a", "1-x")); !ok || string(doc) != `{"_id":"a"}` {
		t.Fatalf("kept revision: %s, %v", doc, ok)
	}
	for _, k := range []string{revKey(src, "a", "2-y"), revKey(src+"other", "a", "1-x")} {
		if _, ok := sr.get(k); ok {
			t.Fatalf("%q served", k)
		}
	}
	for i := 0; i < sharedDocs; i++ {
		sr.put(revKey(src, fmt.Sprint(i), "1-x"), json.RawMessage(`{}`))
	}
	if _, ok := sr.get(revKey(src, "a", "1-x")); ok {
		t.Fatal("oldest revision still kept beyond sharedDocs")
	}
	if _, ok := sr.get(revKey(src, fmt.Sprint(sharedDocs-1), "1-x")); !ok {
		t.Fatal("newest revision not kept")
	}
}

// TestSharedWindowsBounded: windows of many sources hold at most
// sharedTotalRows rows in all; the ones whose signal fired go first.
func TestSharedWindowsBounded(t *testing.T) {
	open := make(chan struct{})
	rows := make([]change, 99)
	for i := range rows {
		rows[i] = change{Seq: json.RawMessage(fmt.Sprint(i + 1)), ID: fmt.Sprint(i)}
	}
	var cw changeWindows
	keep := t.Name() + "keep"
	cw.put(keep, json.RawMessage("0"), rows, open)
	for i := 0; i < 2*sharedTotalRows/100; i++ {
		fired := make(chan struct{})
		cw.put(fmt.Sprintf("%s%d", t.Name(), i), json.RawMessage("0"), rows, fired)
		close(fired) // its source changed since: it goes first
	}
	cw.mu.Lock()
	n := cw.rows
	cw.mu.Unlock()
	if n > sharedTotalRows {
		t.Fatalf("windows hold %d rows, want at most %d", n, sharedTotalRows)
	}
	if _, _, ok := cw.get(keep, json.RawMessage("0"), open, 1000); !ok {
		t.Fatal("a current window was dropped before the stale ones")
	}
}

// TestSharedUpdateSeq: runs of one source in one Group share its
// update_seq for changes_pending for a second; after that it is read
// again. Runs of another Group do not share it.
func TestSharedUpdateSeq(t *testing.T) {
	s, p, rep, src, _ := continuousThroughProxy(t, 3)
	pool := couchclient.NewPool(couchclient.PoolOptions{})
	t.Cleanup(func() { pool.Close() })
	group := new(Group)
	newRun := func(g *Group) *run {
		return &run{rep: rep, src: pool.Endpoint(rep.Source, rep), srcKey: endpointKey(rep), group: g}
	}
	a, b := newRun(group), newRun(group)
	reads := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.counts["GET "] // GET {db}/: the last path segment is empty
	}
	ctx := context.Background()
	p.resetCounts()
	var seqs []string
	for _, r := range []*run{a, a, b} {
		seq, err := r.sourceUpdateSeq(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seqNumber(seq))
	}
	if n := reads(); n != 1 || seqs[0] != "3" || seqs[1] != "3" || seqs[2] != "3" {
		t.Fatalf("three asks within a second: %d reads of the source, seqs %v; want 1 read, 3 each time (%v)", n, seqs, p.counts)
	}
	addDocs(t, s, src, 3, 5)
	time.Sleep(updateSeqShare)
	seq, err := b.sourceUpdateSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != 2 || seqNumber(seq) != "5" {
		t.Errorf("an ask a second later: %d reads, seq %s; want 2 reads, seq 5", n, seq)
	}
	// A run of another group reads for itself.
	if _, err := newRun(new(Group)).sourceUpdateSeq(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != 3 {
		t.Errorf("a run of another group: %d reads of the source, want 3", n)
	}
}

// seqNumber is a seq's number: all of a numeric one, the part before the
// dash of an opaque one ("5-g1AAA").
func seqNumber(seq json.RawMessage) string {
	n, _, _ := strings.Cut(seqString(seq), "-")
	return n
}

// TestSharedRoundReadOnce (issue 40): the runs of a fan-out signalled by
// one write read their round at once; the first one's read of the source
// serves all of those armed with the same signal, instead of one
// _changes request per run. The first request is held up so that the
// others ask while it is under way.
func TestSharedRoundReadOnce(t *testing.T) {
	_, p, rep, _, _ := continuousThroughProxy(t, 5)
	p.slow = 300 * time.Millisecond
	first := true
	p.setFaults(func(n int, r *http.Request, body []byte) fault {
		if strings.HasSuffix(r.URL.Path, "/_changes") && first {
			first = false
			return slowResponse
		}
		return passThrough
	})
	pool := couchclient.NewPool(couchclient.PoolOptions{})
	t.Cleanup(func() { pool.Close() })
	group := new(Group)
	changed := make(chan struct{}) // one write's signal, armed by every run
	const runs = 20
	got := make([]int, runs)
	var wg sync.WaitGroup
	for i := range runs {
		out := make(chan change, 16)
		r := &changesReader{src: pool.Endpoint(rep.Source, rep), rep: rep, log: hclog.NewNullLogger(), out: out,
			group: group, srcKey: endpointKey(rep)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() {
				for range out {
					got[i]++
				}
				close(done)
			}()
			if _, _, err := r.readRound(context.Background(), json.RawMessage("0"), changed); err != nil {
				t.Errorf("run %d: %v", i, err)
			}
			close(out)
			<-done
		}()
	}
	wg.Wait()
	for i, n := range got {
		if n != 5 {
			t.Errorf("run %d read %d changes, want 5", i, n)
		}
	}
	p.mu.Lock()
	n := p.counts["GET _changes"] + p.counts["POST _changes"]
	p.mu.Unlock()
	if n != 1 {
		t.Errorf("%d runs armed with one signal sent %d _changes requests, want 1", runs, n)
	}
}

// TestSharedPending (issue 40): runs of one source whose seqs are opaque
// take changes_pending from the shared window of recent changes: the docs
// in it after their seq, and nothing more while no change was signalled
// since the window's read; after a signal, what the source has after the
// window's end, asked once for all of them, instead of each run asking
// `_changes?limit=0` every pendingInterval.
func TestSharedPending(t *testing.T) {
	s, p, rep, src, _ := continuousThroughProxy(t, 5)
	pool := couchclient.NewPool(couchclient.PoolOptions{})
	t.Cleanup(func() { pool.Close() })
	group := new(Group)
	changed := make(chan struct{})
	out := make(chan change, 16)
	reader := &changesReader{src: pool.Endpoint(rep.Source, rep), rep: rep, log: hclog.NewNullLogger(), out: out,
		group: group, srcKey: endpointKey(rep)}
	if _, _, err := reader.readRound(context.Background(), json.RawMessage("0"), changed); err != nil {
		t.Fatal(err)
	}
	close(out)
	var seqs []json.RawMessage
	for c := range out {
		seqs = append(seqs, c.Seq)
	}
	if len(seqs) != 5 {
		t.Fatalf("read %d changes, want 5", len(seqs))
	}
	if _, err := strconv.Atoi(string(seqs[0])); err == nil {
		t.Skip("the test server's seqs are numbers: pending comes from update_seq")
	}
	pending := func(at json.RawMessage) int64 {
		r := &run{rep: rep, src: pool.Endpoint(rep.Source, rep), srcKey: endpointKey(rep), group: group, tracker: newThroughTracker(at)}
		r.updatePending(context.Background())
		got := r.stats.pendingCount()
		if got == nil {
			t.Fatalf("pending at %s: null", at)
		}
		return *got
	}
	probes := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.counts["GET _changes"]
	}
	p.resetCounts()
	for _, c := range []struct {
		at   int
		want int64
	}{{1, 3}, {4, 0}} {
		if got := pending(seqs[c.at]); got != c.want {
			t.Errorf("window at the source's end: pending after change %d = %d, want %d", c.at+1, got, c.want)
		}
	}
	if n := probes(); n != 0 {
		t.Errorf("window at the source's end: %d _changes probes, want 0", n)
	}
	addDocs(t, s, src, 5, 7)
	close(changed)
	for _, c := range []struct {
		at   int
		want int64
	}{{1, 5}, {3, 3}, {4, 2}} {
		if got := pending(seqs[c.at]); got != c.want {
			t.Errorf("after a signal: pending after change %d = %d, want %d", c.at+1, got, c.want)
		}
	}
	if n := probes(); n != 1 {
		t.Errorf("after a signal: %d _changes probes for three runs, want 1", n)
	}
}

// TestSharedRoundReads (issue 40): runs armed with one signal share the
// first one's read even when the signal fires while it is under way (it
// was sent after they armed it; they read again after); runs armed with
// the next signal while that read is under way share one read of their
// own, instead of each reading alone.
func TestSharedRoundReads(t *testing.T) {
	cases := []struct {
		name      string
		fire      bool // the first signal fires during the first read
		nextGroup bool // 10 more runs armed with the next signal come during it
		wantReads int
	}{
		{"one signal", false, false, 1},
		{"the signal fires during the read", true, false, 1},
		{"the next signal's runs share their own read", true, true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, p, rep, _, _ := continuousThroughProxy(t, 5)
			p.slow = 300 * time.Millisecond
			var mu sync.Mutex
			slowed := 0
			p.setFaults(func(n int, r *http.Request, body []byte) fault {
				mu.Lock()
				defer mu.Unlock()
				if strings.HasSuffix(r.URL.Path, "/_changes") && slowed < 2 {
					slowed++
					return slowResponse
				}
				return passThrough
			})
			pool := couchclient.NewPool(couchclient.PoolOptions{})
			t.Cleanup(func() { pool.Close() })
			group := new(Group)
			var wg sync.WaitGroup
			start := func(changed chan struct{}, runs int) {
				for i := range runs {
					out := make(chan change, 16)
					r := &changesReader{src: pool.Endpoint(rep.Source, rep), rep: rep, log: hclog.NewNullLogger(), out: out,
						group: group, srcKey: endpointKey(rep)}
					wg.Add(1)
					go func() {
						defer wg.Done()
						got := 0
						done := make(chan struct{})
						go func() {
							for range out {
								got++
							}
							close(done)
						}()
						if _, _, err := r.readRound(context.Background(), json.RawMessage("0"), changed); err != nil {
							t.Errorf("run %d: %v", i, err)
						}
						close(out)
						<-done
						if got != 5 {
							t.Errorf("run %d read %d changes, want 5", i, got)
						}
					}()
				}
			}
			first, next := make(chan struct{}), make(chan struct{})
			start(first, 10)
			time.Sleep(100 * time.Millisecond) // the first read is under way
			if tc.fire {
				close(first)
			}
			if tc.nextGroup {
				start(next, 10)
			}
			wg.Wait()
			p.mu.Lock()
			n := p.counts["GET _changes"] + p.counts["POST _changes"]
			p.mu.Unlock()
			if n != tc.wantReads {
				t.Errorf("%d _changes requests, want %d", n, tc.wantReads)
			}
		})
	}
}

// TestSharedFetchOnce (issue 40): runs of one source that miss the same
// revisions at once (a fan-out's runs woken by one write) wait for the
// first one's _bulk_get instead of each sending their own.
func TestSharedFetchOnce(t *testing.T) {
	cases := []struct {
		name      string
		runs      int
		wantReads int
	}{
		{"one run", 1, 1},
		{"ten runs at once", 10, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, p, rep, src, _ := continuousThroughProxy(t, 3)
			var all struct {
				Rows []struct {
					ID    string `json:"id"`
					Value struct {
						Rev string `json:"rev"`
					} `json:"value"`
				} `json:"rows"`
			}
			if err := json.Unmarshal(s.mustDo(t, "GET", src+"/_all_docs", nil), &all); err != nil {
				t.Fatal(err)
			}
			var revs []missingRev
			for _, row := range all.Rows {
				revs = append(revs, missingRev{id: row.ID, rev: row.Value.Rev})
			}
			p.slow = 300 * time.Millisecond
			p.setFaults(func(n int, r *http.Request, body []byte) fault {
				if strings.HasSuffix(r.URL.Path, "/_bulk_get") {
					return slowResponse
				}
				return passThrough
			})
			p.resetCounts()
			pool := couchclient.NewPool(couchclient.PoolOptions{})
			t.Cleanup(func() { pool.Close() })
			group := new(Group)
			var wg sync.WaitGroup
			for i := range tc.runs {
				r := &run{rep: rep, src: pool.Endpoint(rep.Source, rep), srcKey: endpointKey(rep), group: group}
				r.stats.bind(&group.totals)
				w := &bulkWriter{r: r}
				wg.Add(1)
				go func() {
					defer wg.Done()
					var held []*http.Response
					rest, err := r.bulkGet(context.Background(), revs, w, &held)
					if err != nil || len(rest) > 0 || len(w.docs) != len(revs) {
						t.Errorf("run %d: %d docs, %d left, %v; want %d docs", i, len(w.docs), len(rest), err, len(revs))
					}
					for _, resp := range held {
						resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			p.mu.Lock()
			n := p.counts["POST _bulk_get"]
			p.mu.Unlock()
			if n != tc.wantReads {
				t.Errorf("%d runs sent %d _bulk_get requests, want %d", tc.runs, n, tc.wantReads)
			}
		})
	}
}
