package replicate

import (
	"context"
	"errors"
	"fmt"
	"github.com/couchepi/couchepi/parse"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// TestFaults replicates through a proxy injecting one kind of fault; the
// target must end with the source's docs and revisions, except the docs the
// target rejected, which are counted as doc_write_failures.
func TestFaults(t *testing.T) {
	s := startServer(t)
	n := 120
	if os.Getenv("COUCHEPI_SOAK") != "" {
		n = 3000
	}
	cases := []struct {
		name     string
		fault    func(n int, r *http.Request, body []byte) fault
		rejected int
	}{
		{"500s", func(n int, r *http.Request, _ []byte) fault {
			if n%5 == 0 {
				return fail500
			}
			return passThrough
		}, 0},
		{"429 storm", func(n int, r *http.Request, _ []byte) fault {
			if n > 5 && n < 30 {
				return fail429
			}
			return passThrough
		}, 0},
		{"connections cut mid-response", func(n int, r *http.Request, _ []byte) fault {
			if n%4 == 0 && r.Method != "PUT" {
				return cutResponse
			}
			return passThrough
		}, 0},
		{"slow responses past the timeout", func(n int, r *http.Request, _ []byte) fault {
			if n == 8 || n == 15 || n == 23 {
				return slowResponse
			}
			return passThrough
		}, 0},
		{"413 on large _bulk_docs", func(n int, r *http.Request, body []byte) fault {
			if strings.HasSuffix(r.URL.Path, "/_bulk_docs") && (len(body) > 1500 || strings.Contains(string(body), `"huge"`)) {
				return fail413
			}
			return passThrough
		}, 1},
		{"target rejects some docs", func(n int, r *http.Request, body []byte) fault {
			if strings.HasSuffix(r.URL.Path, "/_bulk_docs") && r.Method == "POST" {
				return rejectDocs
			}
			return passThrough
		}, 7},
		{"target rejects docs with attachments", func(n int, r *http.Request, body []byte) fault {
			if r.Method == "PUT" && strings.Contains(r.URL.Path, "/rejectatt") {
				return fail403
			}
			return passThrough
		}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			addDocs(t, s, src, 0, n)
			skip := map[string]bool{}
			switch tc.name {
			case "413 on large _bulk_docs":
				s.mustDo(t, "PUT", src+"/huge", map[string]any{"huge": true})
				skip["huge"] = true
			case "target rejects docs with attachments":
				for i := 0; i < 4; i++ {
					id := fmt.Sprintf("rejectatt%d", i)
					if i == 3 {
						id = "keepatt"
					}
					s.mustDo(t, "PUT", src+"/"+id, map[string]any{"n": i, "_attachments": map[string]any{
						"a.txt": map[string]any{"content_type": "text/plain", "data": "aGVsbG8="},
					}})
					if i < 3 {
						skip[id] = true
					}
				}
			case "target rejects some docs":
				for i := 0; i < tc.rejected; i++ {
					id := fmt.Sprintf("reject%d", i)
					s.mustDo(t, "PUT", src+"/"+id, map[string]any{"n": i})
					skip[id] = true
				}
			}
			p := newFaultProxy(t, s)
			p.slow = 1500 * time.Millisecond
			p.setFaults(tc.fault)
			ps := p.endpointServer(s)
			rep := testRep(ps, src, tgt)
			rep.ConnectionTimeout = 1000
			rep.WorkerBatchSize = 20
			res := runRep(t, rep, Options{})
			if res.Stats.DocWriteFailures != int64(tc.rejected) {
				t.Errorf("doc_write_failures %d, want %d", res.Stats.DocWriteFailures, tc.rejected)
			}
			got := s.contents(t, tgt)
			for id := range skip {
				if _, ok := got[id]; ok {
					t.Errorf("rejected doc %s is on the target", id)
				}
			}
			// Each refused doc is named with its revision (the one sent
			// when the answer does not name it) and the target's words.
			srcTree := s.contents(t, src)
			if len(res.Stats.FailedDocs) != min(tc.rejected, MaxFailedDocs) {
				t.Errorf("failed docs %+v, want %d", res.Stats.FailedDocs, tc.rejected)
			}
			for _, f := range res.Stats.FailedDocs {
				if _, ok := srcTree[f.ID][f.Rev]; !ok || !skip[f.ID] || f.Error == "" || f.Status < 400 {
					t.Errorf("failed doc %+v: not a refused revision of the source", f)
				}
			}
			if d := diffTrees(srcTree, got, skip); len(d) > 0 {
				t.Fatalf("target differs:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// TestDocIDsWithoutPostChanges: a source refusing POST _changes (405) still
// gets a doc_ids replication, filtered on our side.
func TestDocIDsWithoutPostChanges(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	addDocs(t, s, src, 0, 30)
	p := newFaultProxy(t, s)
	p.setFaults(func(n int, r *http.Request, _ []byte) fault {
		if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/_changes") {
			return fail405
		}
		return passThrough
	})
	rep := testRep(p.endpointServer(s), src, tgt)
	rep.DocIDs = []string{"c0003", "c0017", "nope"}
	res := runRep(t, rep, Options{})
	got := s.contents(t, tgt)
	if len(got) != 2 || got["c0003"] == nil || got["c0017"] == nil || res.Stats.DocsWritten != 2 {
		t.Fatalf("target holds %d docs (%v), docs_written %d", len(got), got, res.Stats.DocsWritten)
	}
}

// TestMaxBackoffReachesCaller: once the rate limiter has backed off to its
// maximum, the run fails with max_backoff (the job server restarts such jobs
// with lower settings), not with a generic error.
func TestMaxBackoffReachesCaller(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	now := time.Unix(1000, 0)
	pool := couchclient.NewPool(couchclient.PoolOptions{Now: func() time.Time { return now }})
	defer pool.Close()
	key := couchclient.RateKey{URL: s.Base + src + "/", Method: "GET"}
	for pool.RateLimiter().Interval(key) < couchclient.MaxInterval {
		now = now.Add(100 * time.Millisecond)
		pool.RateLimiter().Failure(key)
	}
	_, err := Run(context.Background(), testRep(s, src, tgt), Options{Pool: pool})
	var re *Error
	if !errors.As(err, &re) || re.Kind != "max_backoff" {
		t.Fatalf("err = %v, want max_backoff", err)
	}
}

// TestUnimportableRevCountsAsFailure (issue 11 item 6): a doc the target
// refuses (its generation is past what minicouch imports) is counted in
// doc_write_failures and the other docs still arrive.
func TestUnimportableRevCountsAsFailure(t *testing.T) {
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("needs minicouch's generation bound on the target")
	}
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	seedSource(t, s, src, 10)
	if code, body := s.do(t, "POST", src+"/_bulk_docs", `{"new_edits":false,"docs":[{"_id":"big","_rev":"9007199254740991-bbbb"}]}`); code != 201 {
		t.Fatalf("plant: %d %s", code, body)
	}
	if code, body := s.do(t, "PUT", src+"/big", `{"_rev":"9007199254740991-bbbb","x":1}`); code != 201 {
		t.Fatalf("update past the import bound: %d %s", code, body)
	}
	// The same with an attachment: the doc goes in its own PUT, and the
	// target's 400 is counted as well, not a crash of the job.
	if code, body := s.do(t, "POST", src+"/_bulk_docs", `{"new_edits":false,"docs":[{"_id":"bigatt","_rev":"9007199254740991-cccc"}]}`); code != 201 {
		t.Fatalf("plant: %d %s", code, body)
	}
	if code, body := s.do(t, "PUT", src+"/bigatt", `{"_rev":"9007199254740991-cccc","_attachments":{"a.txt":{"content_type":"text/plain","data":"aGVsbG8="}}}`); code != 201 {
		t.Fatalf("update past the import bound: %d %s", code, body)
	}
	res := runRep(t, testRep(s, src, tgt), Options{})
	want := s.contents(t, src)
	delete(want, "big")
	delete(want, "bigatt")
	got := s.contents(t, tgt)
	if d := diffTrees(want, got, nil); len(d) > 0 {
		t.Fatalf("target differs:\n%s", strings.Join(d, "\n"))
	}
	if res.Stats.DocWriteFailures != 2 || res.Stats.DocWriteFailuresByReason[ReasonBadRequest] != 2 {
		t.Fatalf("doc_write_failures %d, want 2 (stats %+v)", res.Stats.DocWriteFailures, res.Stats)
	}
}

// TestOpenFailureCauses (issue 11 item 15): an endpoint that cannot be
// opened says why (connection refused, an HTTP status, a dead proxy named
// as such), never with credentials; only a 404 is the bare "could not open".
func TestOpenFailureCauses(t *testing.T) {
	s := startServer(t)
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	deadProxy := "http://pu:proxysecret@" + closed()
	tgt := s.newDB(t, "tgt")
	tests := []struct {
		name   string
		source parse.Endpoint
		want   string
	}{
		{"missing db", s.endpoint("nodb-here"), "db_not_found: could not open " + s.Base + "nodb-here/"},
		{"connection refused", parse.Endpoint{URL: "http://u:secret@" + closed() + "/db/"}, ": connection refused"},
		{"503 to everything", parse.Endpoint{URL: unavailable.URL + "/db/"}, ": the server answered 503 Service Unavailable"},
		{"dead proxy", parse.Endpoint{URL: s.Base + "db/", Proxy: deadProxy}, ": proxy http://pu:*****@" + strings.TrimPrefix(deadProxy, "http://pu:proxysecret@") + " unreachable: connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := testRep(s, "x", tgt)
			rep.Source = tc.source
			rep.RetriesPerRequest = 0
			_, err := Run(context.Background(), rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef"})
			if err == nil {
				t.Fatal("Run succeeded")
			}
			msg := err.Error()
			if tc.name == "missing db" {
				if msg != tc.want {
					t.Fatalf("error %q, want %q", msg, tc.want)
				}
			} else if !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q does not say %q", msg, tc.want)
			}
			for _, secret := range []string{"secret", "proxysecret"} {
				if strings.Contains(msg, secret) {
					t.Fatalf("error reveals a credential: %q", msg)
				}
			}
		})
	}
}

// TestConnectTo (issue 11 item 13): with `[replicator] connect_to` mapping
// a name that does not resolve to the server's address, the replication
// runs; without it, the name fails to resolve.
func TestConnectTo(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	seedSource(t, s, src, 5)
	u, err := url.Parse(s.Base)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	rep := testRep(s, src, tgt)
	rep.Source.URL = "http://couchepi-connect-to.invalid:" + port + "/" + src + "/"
	rep.RetriesPerRequest = 0

	_, err = Run(context.Background(), rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef"})
	if err == nil || !strings.Contains(err.Error(), "could not resolve") {
		t.Fatalf("without connect_to: %v, want a resolution failure", err)
	}

	opts := parse.DefaultOptions()
	opts.ConnectTo, err = parse.ParseConnectTo("couchepi-connect-to.invalid:" + port + ":127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	pool := couchclient.NewPool(couchclient.PoolOptions{})
	defer pool.Close()
	if err := pool.Configure(opts); err != nil {
		t.Fatal(err)
	}
	res := runRep(t, rep, Options{Pool: pool})
	if res.Stats.DocsWritten == 0 {
		t.Fatalf("nothing replicated through connect_to: %+v", res.Stats)
	}
	if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
		t.Fatalf("target differs:\n%s", strings.Join(d, "\n"))
	}
}

// TestEndpointRefusals: an endpoint that refuses the replication's
// credentials fails the start with CouchDB's error and status (401
// unauthorized, 403 forbidden), also when the refusal is the target's
// creation (CouchDB 3.5 db_open tells 401 and 403 apart there too).
func TestEndpointRefusals(t *testing.T) {
	s := startServer(t)
	cases := []struct {
		name   string
		refuse string // the request refused: "GET source" or "PUT target"
		answer fault
		kind   string
		status int
	}{
		{"source 401", "GET source", fail401, "unauthorized", 401},
		{"source 403", "GET source", fail403, "forbidden", 403},
		{"target creation 401", "PUT target", fail401, "unauthorized", 401},
		{"target creation 403", "PUT target", fail403, "forbidden", 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := s.newDB(t, "src")
			addDocs(t, s, src, 0, 3)
			tgt := s.newDB(t, "tgt")
			refused := map[string]string{"GET source": "GET /" + src, "PUT target": "PUT /" + tgt}[tc.refuse]
			p := newFaultProxy(t, s)
			p.setFaults(func(_ int, r *http.Request, _ []byte) fault {
				if r.Method+" "+strings.TrimSuffix(r.URL.Path, "/") == refused {
					return tc.answer
				}
				return passThrough
			})
			rep := testRep(p.endpointServer(s), src, tgt)
			rep.CreateTarget = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef"})
			var re *Error
			if !errors.As(err, &re) || re.Kind != tc.kind || re.HTTPStatus() != tc.status {
				t.Fatalf("err = %v, want kind %s, status %d", err, tc.kind, tc.status)
			}
		})
	}
}
