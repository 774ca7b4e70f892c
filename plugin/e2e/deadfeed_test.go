package e2e

import (
	"encoding/json"
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
)

// deadSource is a replication source on 127.0.0.1 whose `GET {db}` and
// `_changes` the test scripts (the `limit=0` probe hangs unless healthy);
// the rest it forwards to minicouch.
type deadSource struct {
	mode      string // "headers", "rows", "heartbeats", "healthy"
	updateSeq func(n int64) string
	up        *couch
	proxy     *httputil.ReverseProxy
	srv       *httptest.Server
	gets      atomic.Int64
	done      chan struct{}
}

func newDeadSource(t *testing.T, c *couch, mode string, updateSeq func(int64) string) *deadSource {
	u, _ := url.Parse("http://" + c.addr)
	d := &deadSource{mode: mode, updateSeq: updateSeq, up: c, proxy: httputil.NewSingleHostReverseProxy(u), done: make(chan struct{})}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(func() {
		close(d.done)
		d.srv.CloseClientConnections()
		d.srv.Close()
	})
	return d
}

func (d *deadSource) url(db string) string {
	return "http://admin:pass@" + strings.TrimPrefix(d.srv.URL, "http://") + "/" + db
}

func (d *deadSource) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	q := r.URL.Query()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		fmt.Fprintf(w, `{"db_name":%q,"update_seq":%s,"instance_start_time":"0","doc_count":0}`, parts[0], d.updateSeq(d.gets.Add(1)))
	case len(parts) == 2 && parts[1] == "_changes" && q.Get("limit") == "0":
		if d.mode == "healthy" {
			fmt.Fprint(w, `{"results":[],"last_seq":0,"pending":0}`)
			return
		}
		d.hang(w, r, `{"results":[`)
	case len(parts) == 2 && parts[1] == "_changes":
		continuous := q.Get("feed") == "continuous"
		switch d.mode {
		case "headers":
			d.hang(w, r, `{"results":[`)
		case "rows":
			_, body := d.up.req("GET", "/"+parts[0]+"/_changes?style=all_docs&since="+url.QueryEscape(q.Get("since")), "")
			var feed struct {
				Results []json.RawMessage `json:"results"`
			}
			json.Unmarshal([]byte(body), &feed)
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
			d.hang(w, r, b.String())
		default: // heartbeats, healthy: a newline every 200 ms
			tk := time.NewTicker(200 * time.Millisecond)
			defer tk.Stop()
			for {
				w.(http.Flusher).Flush()
				select {
				case <-tk.C:
					w.Write([]byte("\n"))
				case <-r.Context().Done():
					return
				case <-d.done:
					return
				}
			}
		}
	default:
		d.proxy.ServeHTTP(w, r)
	}
}

func (d *deadSource) hang(w http.ResponseWriter, r *http.Request, prefix string) {
	w.Write([]byte(prefix))
	w.(http.Flusher).Flush()
	select {
	case <-r.Context().Done():
	case <-d.done:
	}
}

// deadFeedModes are the fake sources of TestE2EDeadFeed.
var deadFeedModes = []struct {
	id, mode  string
	updateSeq func(int64) string
	healthy   bool
}{
	{"headers-9-opaque", "headers", func(int64) string { return `"9-opaque"` }, false},
	{"headers-opaque", "headers", func(int64) string { return `"g1AAAAopaque"` }, false},
	{"headers-numeric", "headers", func(int64) string { return `9` }, false},
	{"rows-opaque", "rows", func(int64) string { return `"g1AAAAopaque"` }, false},
	{"heartbeats-moving-n-opaque", "heartbeats", func(n int64) string { return fmt.Sprintf(`"%d-opaque"`, 10+n) }, false},
	{"heartbeats-moving-numeric", "heartbeats", func(n int64) string { return fmt.Sprint(10 + n) }, false},
	{"healthy-quiet", "healthy", func(int64) string { return `0` }, true},
}

// TestE2EDeadFeed (issue 37 item 3): on minicouch with the replicator,
// a continuous replication from each fake source of deadFeedModes
// becomes `crashing`, with a `stalled` or `crashed` event, within the
// feed's timeout plus stall_timeout_sec (5 s here) and the time to
// learn its source moved; the healthy quiet one stays running. Meanwhile
// `_scheduler/jobs` shows lag_sec and changes_pending null while the
// source's position is unknown, never 0 for a source that is ahead.
// With COUCHEPI_DEADFEED_DEFAULTS=1 it measures with the defaults
// (stall_timeout_sec 300) instead: about a minute and a half.
func TestE2EDeadFeed(t *testing.T) {
	extra, limit := "stall_timeout_sec = 5\n", 45*time.Second
	if os.Getenv("COUCHEPI_DEADFEED_DEFAULTS") != "" {
		extra, limit = "", 100*time.Second
	}
	c := startCouch(t, extra)
	c.must("PUT", "/tgt", "", 201)
	c.must("PUT", "/rows", "", 201)
	c.putDocs("rows", 0, 3)
	start := time.Now()
	for _, m := range deadFeedModes {
		d := newDeadSource(t, c, m.mode, m.updateSeq)
		src := d.url("nosuchdb")
		if m.mode == "rows" {
			src = d.url("rows")
		}
		c.must("PUT", "/_replicator/"+m.id, fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true}`, src, c.endpoint("tgt")), 201)
	}
	type seen struct {
		flagged       time.Duration
		event, reason string
		lag, pending  map[string]bool
	}
	var mu sync.Mutex
	got := map[string]*seen{}
	for _, m := range deadFeedModes {
		got[m.id] = &seen{lag: map[string]bool{}, pending: map[string]bool{}}
	}
	show := func(raw json.RawMessage) string {
		switch s := string(raw); s {
		case "", "null", "0":
			if s == "" {
				return "absent"
			}
			return s
		default:
			return ">0"
		}
	}
	for time.Since(start) < limit {
		_, body := c.req("GET", "/_scheduler/jobs", "")
		var jobs struct {
			Jobs []struct {
				DocID   string `json:"doc_id"`
				Info    map[string]json.RawMessage
				History []struct {
					Type   string `json:"type"`
					Reason string `json:"reason"`
				} `json:"history"`
			} `json:"jobs"`
		}
		json.Unmarshal([]byte(body), &jobs)
		done := 0
		mu.Lock()
		for _, j := range jobs.Jobs {
			s := got[j.DocID]
			if s == nil {
				continue
			}
			if s.flagged == 0 {
				for _, h := range j.History {
					if h.Type == "stalled" || h.Type == "crashed" {
						s.flagged, s.event, s.reason = time.Since(start), h.Type, h.Reason
					}
				}
			}
			if s.flagged == 0 && j.Info != nil {
				s.lag[show(j.Info["lag_sec"])] = true
				s.pending[show(j.Info["changes_pending"])] = true
			}
		}
		for _, s := range got {
			if s.flagged != 0 {
				done++
			}
		}
		mu.Unlock()
		if done == len(deadFeedModes)-1 && time.Since(start) > 25*time.Second {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	keys := func(m map[string]bool) string {
		var s []string
		for _, k := range []string{"null", "0", ">0", "absent"} {
			if m[k] {
				s = append(s, k)
			}
		}
		return strings.Join(s, ",")
	}
	for _, m := range deadFeedModes {
		s := got[m.id]
		t.Logf("MEASURE %s: flagged after %v (%s: %s); meanwhile lag_sec %s, changes_pending %s",
			m.id, s.flagged.Round(time.Second), s.event, s.reason, keys(s.lag), keys(s.pending))
		if extra == "" {
			continue // measured, not checked
		}
		switch {
		case m.healthy && s.flagged != 0:
			t.Errorf("%s: a healthy quiet source was flagged after %v: %s", m.id, s.flagged, s.reason)
		case !m.healthy && s.flagged == 0:
			t.Errorf("%s: not flagged within %v", m.id, limit)
		case !m.healthy && m.id == "headers-opaque" && (s.lag["0"] || s.lag[">0"] || s.pending["0"] || s.pending[">0"]):
			t.Errorf("%s: the source's position is unknown, yet lag_sec read %s and changes_pending %s", m.id, keys(s.lag), keys(s.pending))
		case !m.healthy && m.id != "headers-opaque" && m.id != "rows-opaque" && s.pending["0"]:
			t.Errorf("%s: the source is ahead, yet changes_pending read 0", m.id)
		}
	}
}
