package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// feedMode is what a fakeSource's _changes feed does.
type feedMode int

const (
	silentAfterHeaders feedMode = iota // 200, `{"results":[`, then nothing until the client goes
	silentAfterRows                    // the real db's rows, then nothing
	heartbeatsOnly                     // a newline every 200 ms, never a row nor an end
	endsAtTimeout                      // CouchDB's: nothing, then the end at `timeout`
)

// fakeSource is a source whose `GET {db}` and `_changes` the test
// scripts; the rest (docs, checkpoints) it forwards to a real server's db
// of the same name. It listens on 127.0.0.1 only.
type fakeSource struct {
	up        *testServer
	mode      feedMode
	updateSeq func(n int64) string // JSON of update_seq at the n-th GET {db} (from 1)
	pending   func(n int64) string // the limit=0 probe's pending (JSON), "" to hang
	srv       *httptest.Server
	proxy     *httputil.ReverseProxy
	gets      atomic.Int64
	done      chan struct{}
	stopOnce  sync.Once
}

func newFakeSource(t testing.TB, up *testServer, mode feedMode, updateSeq, pending func(int64) string) *fakeSource {
	u, _ := url.Parse(up.Base)
	f := &fakeSource{up: up, mode: mode, updateSeq: updateSeq, pending: pending,
		proxy: httputil.NewSingleHostReverseProxy(u), done: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.stopOnce.Do(func() { close(f.done) })
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// endpointServer is a testServer view whose URLs go to the fake source.
func (f *fakeSource) endpointServer() *testServer {
	return &testServer{Kind: f.up.Kind, Base: f.srv.URL + "/", User: f.up.User, Pass: f.up.Pass}
}

func (f *fakeSource) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		n := f.gets.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"db_name":%q,"update_seq":%s,"instance_start_time":"0","doc_count":0}`, parts[0], f.updateSeq(n))
	case len(parts) == 2 && parts[1] == "_changes" && r.URL.Query().Get("limit") == "0":
		p := f.pending(f.gets.Load())
		if p == "" {
			f.hang(w, r, `{"results":[`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"results":[],"last_seq":%q,"pending":%s}`, "0", p)
	case len(parts) == 2 && parts[1] == "_changes":
		f.changes(w, r, parts[0])
	default:
		f.proxy.ServeHTTP(w, r)
	}
}

func (f *fakeSource) changes(w http.ResponseWriter, r *http.Request, db string) {
	continuous := r.URL.Query().Get("feed") == "continuous"
	w.Header().Set("Content-Type", "application/json")
	switch f.mode {
	case silentAfterHeaders:
		f.hang(w, r, `{"results":[`)
	case silentAfterRows:
		var feed struct {
			Results []json.RawMessage `json:"results"`
		}
		q := url.Values{"style": {"all_docs"}, "since": {r.URL.Query().Get("since")}}
		code, body := f.up.do(nopTB{}, http.MethodGet, db+"/_changes?"+q.Encode(), nil)
		if code != http.StatusOK || json.Unmarshal(body, &feed) != nil {
			http.Error(w, `{"error":"upstream"}`, http.StatusBadGateway)
			return
		}
		var b strings.Builder
		if !continuous {
			b.WriteString("{\"results\":[\n")
		}
		for i, row := range feed.Results {
			if i > 0 && !continuous {
				b.WriteString(",")
			}
			b.Write(row)
			b.WriteString("\n")
		}
		f.hang(w, r, b.String())
	case heartbeatsOnly:
		if !continuous {
			w.Write([]byte("{\"results\":[\n"))
		}
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			w.(http.Flusher).Flush()
			select {
			case <-t.C:
				w.Write([]byte("\n"))
			case <-r.Context().Done():
				return
			case <-f.done:
				return
			}
		}
	case endsAtTimeout:
		ms, _ := time.ParseDuration(r.URL.Query().Get("timeout") + "ms")
		if !continuous {
			w.Write([]byte("{\"results\":[\n"))
		}
		w.(http.Flusher).Flush()
		select {
		case <-time.After(ms):
		case <-r.Context().Done():
			return
		case <-f.done:
			return
		}
		since := r.URL.Query().Get("since")
		if continuous {
			fmt.Fprintf(w, "{\"last_seq\":%q,\"pending\":0}\n", since)
		} else {
			fmt.Fprintf(w, "],\n\"last_seq\":%q,\"pending\":0}\n", since)
		}
	}
}

// hang sends 200 and prefix, then nothing until the client goes.
func (f *fakeSource) hang(w http.ResponseWriter, r *http.Request, prefix string) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(prefix))
	w.(http.Flusher).Flush()
	select {
	case <-r.Context().Done():
	case <-f.done:
	}
}

// nopTB lets the fake source use testServer.do from its handlers, where
// a failed request is an answer, not the end of the test.
type nopTB struct{ testing.TB }

func (nopTB) Helper()               {}
func (nopTB) Fatalf(string, ...any) {}

// deadFeedCase is one fake source, and whether the run must end.
type deadFeedCase struct {
	name       string
	mode       feedMode
	docs       int // in the real source db
	continuous bool
	updateSeq  func(n int64) string
	pending    func(n int64) string
	known      bool // the source's position can be known (else lag_sec and changes_pending must stay null)
	healthy    bool // a healthy source: the run must not end
}

func fixed(s string) func(int64) string { return func(int64) string { return s } }

func deadFeedCases() []deadFeedCase {
	hang := fixed("")
	return []deadFeedCase{
		{name: "silent after headers, update_seq 9-opaque, limit=0 hangs", mode: silentAfterHeaders, continuous: true,
			updateSeq: fixed(`"9-opaque"`), pending: hang, known: true},
		{name: "silent after headers, update_seq opaque, limit=0 hangs", mode: silentAfterHeaders, continuous: true,
			updateSeq: fixed(`"g1AAAAopaque"`), pending: hang},
		{name: "silent after headers, update_seq 9", mode: silentAfterHeaders, continuous: true,
			updateSeq: fixed(`9`), pending: hang, known: true},
		{name: "silent after headers, one-shot, update_seq opaque, limit=0 hangs", mode: silentAfterHeaders,
			updateSeq: fixed(`"g1AAAAopaque"`), pending: hang},
		{name: "silent after 3 rows, update_seq opaque, limit=0 hangs", mode: silentAfterRows, docs: 3, continuous: true,
			updateSeq: fixed(`"g1AAAAopaque"`), pending: hang},
		{name: "heartbeats while update_seq moves on (N-opaque), limit=0 hangs", mode: heartbeatsOnly, continuous: true,
			updateSeq: func(n int64) string { return fmt.Sprintf(`"%d-opaque"`, 10+n) }, pending: hang, known: true},
		{name: "heartbeats while update_seq moves on (numeric)", mode: heartbeatsOnly, continuous: true,
			updateSeq: func(n int64) string { return fmt.Sprint(10 + n) }, pending: hang, known: true},
		{name: "healthy quiet: heartbeats, update_seq 0", mode: heartbeatsOnly, continuous: true,
			updateSeq: fixed(`0`), pending: fixed("0"), known: true, healthy: true},
		{name: "healthy quiet: ends at timeout, update_seq opaque", mode: endsAtTimeout, continuous: true,
			updateSeq: fixed(`"g1AAAAopaque"`), pending: fixed("0"), known: true, healthy: true},
	}
}

// deadFeedRun is what one run against a fake source showed.
type deadFeedRun struct {
	err     error
	flagged time.Duration // until Run returned (0: it did not)
	lags    map[string]bool
	pending map[string]bool
}

// runAgainst runs a replication from a fakeSource of tc for at most
// limit, sampling its live stats.
func runAgainst(t *testing.T, s *testServer, tc deadFeedCase, opts Options, connTimeout int, limit time.Duration) deadFeedRun {
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	if tc.docs > 0 {
		addDocs(t, s, src, 0, tc.docs)
	}
	f := newFakeSource(t, s, tc.mode, tc.updateSeq, tc.pending)
	rep := testRep(f.endpointServer(), src, tgt)
	rep.Target = s.endpoint(tgt)
	rep.Continuous = tc.continuous
	rep.ConnectionTimeout = connTimeout
	var live atomic.Pointer[func() Stats]
	opts.ServerUUID = "0123456789abcdef0123456789abcdef"
	opts.Live = func(f func() Stats) { live.Store(&f) }
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out := deadFeedRun{lags: map[string]bool{}, pending: map[string]bool{}}
	show := func(p *int64) string {
		if p == nil {
			return "null"
		}
		if *p == 0 {
			return "0"
		}
		return ">0"
	}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			if g := live.Load(); g != nil {
				st := (*g)()
				out.lags[show(st.LagSec)] = true
				out.pending[show(st.ChangesPending)] = true
			}
		}
	}()
	start := time.Now()
	_, out.err = Run(ctx, rep, opts)
	if !errors.Is(out.err, ErrStopped) {
		out.flagged = time.Since(start)
	}
	cancel()
	<-sampled
	return out
}

func keys(m map[string]bool) string {
	var s []string
	for _, k := range []string{"null", "0", ">0"} {
		if m[k] {
			s = append(s, k)
		}
	}
	return strings.Join(s, ",")
}

// TestDeadFeed (issue 37 item 3): a source whose feed goes silent, or
// sends heartbeats only while its update_seq moves on, ends the run with
// a visible error within the feed's timeout plus stall_timeout_sec (and
// the time to learn the source moved), whatever the source says of its
// position; a quiet, healthy source never does. While the source's
// position is unknown, lag_sec and changes_pending read null, never 0.
func TestDeadFeed(t *testing.T) {
	s := startServer(t)
	const (
		connTimeout = 3000 // the feed asks for timeout=1000
		stall       = 2 * time.Second
	)
	// Learning the source moved takes a probe (a pendingInterval, plus a
	// hanging probe's deadline), then stall; silence is seen after the
	// feed's timeout plus stall. A second of ticks, and as much again.
	bound := pendingInterval + probeTimeout(connTimeout) + stall + 4*time.Second
	for _, tc := range deadFeedCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			limit := 30 * time.Second
			if tc.healthy {
				limit = feedTimeout(connTimeout) + stall + pendingInterval + 3*time.Second
			}
			got := runAgainst(t, s, tc, Options{StallTimeout: stall}, connTimeout, limit)
			t.Logf("ended after %v with %v; lag_sec %s, changes_pending %s",
				got.flagged.Round(100*time.Millisecond), got.err, keys(got.lags), keys(got.pending))
			if tc.healthy {
				if got.flagged != 0 {
					t.Fatalf("a healthy quiet source: the run ended after %v: %v", got.flagged, got.err)
				}
				if !got.lags["0"] || got.lags[">0"] {
					t.Errorf("lag_sec read %s for a caught-up run", keys(got.lags))
				}
				return
			}
			var re *Error
			if !errors.As(got.err, &re) {
				t.Fatalf("run ended with %v after %v: want a visible error", got.err, got.flagged)
			}
			if got.flagged > bound {
				t.Errorf("run ended %v after it started: want within %v", got.flagged, bound)
			}
			if !tc.known && (got.lags["0"] || got.lags[">0"] || got.pending["0"] || got.pending[">0"]) {
				t.Errorf("the source's position is unknown, yet lag_sec read %s and changes_pending %s", keys(got.lags), keys(got.pending))
			}
			// (lag_sec may read 0 in the first second the run knows it is
			// behind: behind for less than a second.)
			if tc.known && (got.pending["0"] || !got.pending[">0"]) {
				t.Errorf("the source is ahead, yet changes_pending read %s", keys(got.pending))
			}
		})
	}
}

// TestDeadFeedRetried: without the stall watch, a feed that says nothing
// within connection_timeout is reopened, and once the retries are spent
// (retries_per_request, or the pool's RetryWindow) the run fails with
// CouchDB's changes_reader_died, not running on forever.
func TestDeadFeedRetried(t *testing.T) {
	s := startServer(t)
	tc := deadFeedCases()[1] // silent after headers, opaque, limit=0 hangs
	tests := []struct {
		name    string
		retries int
		window  time.Duration
	}{
		{"retries_per_request spent", 2, time.Hour},
		{"retry window spent", 10, 2500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := couchclient.NewPool(couchclient.PoolOptions{HealthThreshold: 2 * tt.window})
			defer pool.Close()
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			f := newFakeSource(t, s, tc.mode, tc.updateSeq, tc.pending)
			rep := testRep(f.endpointServer(), src, tgt)
			rep.Target = s.endpoint(tgt)
			rep.Continuous = true
			rep.ConnectionTimeout = 1500
			rep.RetriesPerRequest = tt.retries
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef", Pool: pool})
			var re *Error
			if !errors.As(err, &re) || re.Kind != "changes_reader_died" || !strings.HasPrefix(re.Reason, "timeout") {
				t.Fatalf("run ended with %v after %v: want changes_reader_died: timeout…", err, time.Since(start))
			}
			t.Logf("ended after %v: %v", time.Since(start).Round(100*time.Millisecond), err)
		})
	}
}

// TestDeadFeedDefaults measures, with CouchDB's defaults
// (connection_timeout 30000) and stall_timeout_sec 5 and 300, how long
// each fake source takes to end its run. About six minutes: run with
// COUCHEPI_DEADFEED_DEFAULTS=1.
func TestDeadFeedDefaults(t *testing.T) {
	if os.Getenv("COUCHEPI_DEADFEED_DEFAULTS") == "" {
		t.Skip("set COUCHEPI_DEADFEED_DEFAULTS=1 to measure with the default timeouts")
	}
	s := startServer(t)
	for _, stall := range []time.Duration{5 * time.Second, DefaultStallTimeout} {
		for _, tc := range deadFeedCases() {
			t.Run(fmt.Sprintf("stall %v/%s", stall, tc.name), func(t *testing.T) {
				t.Parallel()
				limit := stall + 45*time.Second
				if tc.healthy {
					limit = 45 * time.Second
				}
				got := runAgainst(t, s, tc, Options{StallTimeout: stall}, 30000, limit)
				t.Logf("MEASURE stall_timeout_sec=%d | %s | flagged after %v | %v | lag_sec %s | changes_pending %s",
					int(stall/time.Second), tc.name, got.flagged.Round(time.Second), got.err, keys(got.lags), keys(got.pending))
			})
		}
	}
}

// TestSeqPrefix: the number a CouchDB seq starts with, where it has one.
func TestSeqPrefix(t *testing.T) {
	tests := []struct {
		seq  string
		want int64
		ok   bool
	}{
		{`42`, 42, true},
		{`"9-opaque"`, 9, true},
		{`"123-g1AAAAFTeJzLYWBg4MhgTmHgzcvPy09JdcjLz8gvLskBCeexAEmGBiD1HwiyEhlwqHtCxEHNDiKHVT0ASm8h6g"`, 123, true},
		{`"0"`, 0, true},
		{`"g1AAAAopaque"`, 0, false},
		{`"-3-x"`, 0, false},
		{`[3,"x"]`, 0, false},
		{`null`, 0, false},
	}
	for _, tt := range tests {
		n, ok := seqPrefix(json.RawMessage(tt.seq))
		if n != tt.want || ok != tt.ok {
			t.Errorf("seqPrefix(%s) = %d, %v; want %d, %v", tt.seq, n, ok, tt.want, tt.ok)
		}
	}
}
