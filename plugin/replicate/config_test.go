package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
)

// lastSeq is the last_seq of db's changes feed.
func (s *testServer) lastSeq(t testing.TB, db string) json.RawMessage {
	t.Helper()
	var v struct {
		LastSeq json.RawMessage `json:"last_seq"`
	}
	json.Unmarshal(s.mustDo(t, "GET", db+"/_changes", nil), &v)
	return v.LastSeq
}

// sameJSON compares two JSON values by meaning.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// configuredPool is a pool given the `[replicator]` options o.
func configuredPool(t testing.TB, o parse.Options) *couchclient.Pool {
	t.Helper()
	pool := couchclient.NewPool(couchclient.PoolOptions{})
	t.Cleanup(func() { pool.Close() })
	if err := pool.Configure(o); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return pool
}

// TestMaxDocumentIDLength: changes whose id is longer than
// max_document_id_length bytes are not replicated and count as
// doc_write_failures, and the through_seq and checkpoint still reach the
// source's last seq (the longest id is the last change).
func TestMaxDocumentIDLength(t *testing.T) {
	s := startServer(t)
	multi := strings.Repeat("é", 15) // 15 characters, 30 bytes
	long := strings.Repeat("x", 40)
	cases := []struct {
		limit    int
		skipped  []string
		failures int64
	}{
		{0, nil, 0},
		{40, nil, 0},
		{30, []string{long}, 1},
		{20, []string{multi, long}, 2}, // bytes, not characters
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint("limit ", tc.limit), func(t *testing.T) {
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			addDocs(t, s, src, 0, 10)
			s.mustDo(t, "PUT", src+"/"+url.PathEscape(multi), map[string]any{"n": "multi"})
			s.mustDo(t, "PUT", src+"/"+long, map[string]any{"n": "long"})
			res := runRep(t, testRep(s, src, tgt), Options{MaxDocumentIDLength: tc.limit})
			if res.Stats.DocWriteFailures != tc.failures {
				t.Errorf("doc_write_failures %d, want %d", res.Stats.DocWriteFailures, tc.failures)
			}
			got := s.contents(t, tgt)
			skip := map[string]bool{}
			for _, id := range tc.skipped {
				skip[id] = true
				if _, ok := got[id]; ok {
					t.Errorf("doc with a too long id %q was replicated", id)
				}
			}
			if d := diffTrees(s.contents(t, src), got, skip); len(d) > 0 {
				t.Errorf("target differs:\n%s", strings.Join(d, "\n"))
			}
			last := s.lastSeq(t, src)
			if !sameJSON(res.Stats.ThroughSeq, last) {
				t.Errorf("through_seq %s, want the source's last seq %s", res.Stats.ThroughSeq, last)
			}
			var cp struct {
				SourceLastSeq json.RawMessage `json:"source_last_seq"`
			}
			json.Unmarshal(res.Body, &cp)
			if !sameJSON(cp.SourceLastSeq, last) {
				t.Errorf("checkpoint source_last_seq %s, want %s", cp.SourceLastSeq, last)
			}
		})
	}
}

// TestRequestTimeout: a request slower than request_timeout is cut and
// retried, and the replication completes; without request_timeout it is
// waited for; a _changes feed is never cut by it.
func TestRequestTimeout(t *testing.T) {
	s := startServer(t)
	isBulkDocs := func(r *http.Request) bool { return r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/_bulk_docs") }
	isFeed := func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/_changes") && r.URL.Query().Get("feed") != ""
	}
	cases := []struct {
		name      string
		timeoutMS int
		match     func(*http.Request) bool
		want      int // requests the match saw
	}{
		{"_bulk_docs past request_timeout is retried", 400, isBulkDocs, 2},
		{"_bulk_docs without request_timeout is waited for", 0, isBulkDocs, 1},
		{"_changes feed is not bound by request_timeout", 400, isFeed, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			addDocs(t, s, src, 0, 1) // one doc: one _bulk_docs unless retried
			p := newFaultProxy(t, s)
			p.slow = 1500 * time.Millisecond
			var mu sync.Mutex
			seen := 0
			p.setFaults(func(_ int, r *http.Request, _ []byte) fault {
				if !tc.match(r) {
					return passThrough
				}
				mu.Lock()
				defer mu.Unlock()
				seen++
				if seen == 1 {
					return slowResponse
				}
				return passThrough
			})
			o := parse.DefaultOptions()
			o.RequestTimeout = tc.timeoutMS
			res := runRep(t, testRep(p.endpointServer(s), src, tgt), Options{Pool: configuredPool(t, o)})
			mu.Lock()
			n := seen
			mu.Unlock()
			if n != tc.want {
				t.Errorf("%d matching requests, want %d", n, tc.want)
			}
			if res.Stats.DocsWritten != 1 {
				t.Errorf("docs_written %d, want 1", res.Stats.DocsWritten)
			}
			if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
				t.Errorf("target differs:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// TestMissingDocRetry: a revision the source answers {"missing":rev} for
// is fetched again once, missing_doc_retry_msec later and without
// atts_since, and then replicated.
func TestMissingDocRetry(t *testing.T) {
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("pouchdb-server's _revs_diff gives no possible_ancestors, so no fetch carries atts_since")
	}
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	var doc struct {
		Rev string `json:"rev"`
	}
	json.Unmarshal(s.mustDo(t, "PUT", src+"/d", map[string]any{"v": 1}), &doc)
	runRep(t, testRep(s, src, tgt), Options{}) // the target has 1-x: a possible ancestor
	s.mustDo(t, "PUT", src+"/d", map[string]any{"_rev": doc.Rev, "v": 2})

	type fetch struct {
		at        time.Time
		attsSince bool
	}
	var mu sync.Mutex
	var fetches []fetch
	p := newFaultProxy(t, s)
	p.setFaults(func(_ int, r *http.Request, _ []byte) fault {
		if r.Method != "GET" || !strings.HasSuffix(r.URL.Path, "/d") || r.URL.Query().Get("open_revs") == "" {
			return passThrough
		}
		mu.Lock()
		defer mu.Unlock()
		fetches = append(fetches, fetch{time.Now(), r.URL.Query().Get("atts_since") != ""})
		if len(fetches) == 1 {
			return answerMissing
		}
		return passThrough
	})
	rep := testRep(p.endpointServer(s), src, tgt)
	rep.UseBulkGet = false
	const wait = 2500 * time.Millisecond // longer than the 2 s default: the option must be used
	res := runRep(t, rep, Options{MissingDocRetry: wait})
	mu.Lock()
	defer mu.Unlock()
	if len(fetches) != 2 {
		t.Fatalf("%d fetches of d, want 2", len(fetches))
	}
	if !fetches[0].attsSince || fetches[1].attsSince {
		t.Errorf("atts_since on first/second fetch: %v/%v, want true/false", fetches[0].attsSince, fetches[1].attsSince)
	}
	if gap := fetches[1].at.Sub(fetches[0].at); gap < wait {
		t.Errorf("refetched after %v, want at least missing_doc_retry_msec %v", gap, wait)
	}
	if res.Stats.DocWriteFailures != 0 || res.Stats.DocsWritten != 1 {
		t.Errorf("docs_written %d, doc_write_failures %d; want 1, 0", res.Stats.DocsWritten, res.Stats.DocWriteFailures)
	}
	if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
		t.Errorf("target differs:\n%s", strings.Join(d, "\n"))
	}
}

// TestURITooLong: a source answering 414 to long open_revs URLs gets the
// same fetch again with the URL limit halved (a shorter atts_since) until it
// fits; below 200 characters the replication fails with request_uri_too_long.
func TestURITooLong(t *testing.T) {
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("pouchdb-server's _revs_diff gives no possible_ancestors, so no URL carries a long atts_since")
	}
	cases := []struct {
		name     string
		maxURI   int // the proxy answers 414 to longer request URIs
		want414  int
		wantFail bool
	}{
		{"fits after three halvings", 900, 3, false},
		{"never fits", 0, 6, true}, // 7000, 3500, 1750, 875, 437, 218; 109 < 200
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			// The target holds 60 conflicting 1-revs of "big", all possible
			// ancestors of the source's 2-rev: a ~2500 character atts_since.
			var leaves []map[string]any
			for i := 0; i < 60; i++ {
				id := fmt.Sprintf("%032x", i)
				leaves = append(leaves, map[string]any{"_id": "big", "_rev": "1-" + id, "i": i,
					"_revisions": map[string]any{"start": 1, "ids": []string{id}}})
			}
			s.bulk(t, tgt, false, leaves...)
			s.bulk(t, src, false, map[string]any{"_id": "big", "_rev": "2-" + strings.Repeat("f", 32), "v": 2,
				"_revisions": map[string]any{"start": 2, "ids": []string{strings.Repeat("f", 32), fmt.Sprintf("%032x", 0)}}})
			p := newFaultProxy(t, s)
			tooLong := 0
			p.setFaults(func(_ int, r *http.Request, _ []byte) fault {
				if r.Method == "GET" && r.URL.Query().Get("open_revs") != "" && len(r.URL.RequestURI()) > tc.maxURI {
					tooLong++
					return uriTooLong
				}
				return passThrough
			})
			rep := testRep(p.endpointServer(s), src, tgt)
			rep.UseBulkGet = false
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef"})
			p.mu.Lock()
			n := tooLong
			p.mu.Unlock()
			if n != tc.want414 {
				t.Errorf("%d answers 414, want %d", n, tc.want414)
			}
			var re *Error
			switch {
			case tc.wantFail && (!errors.As(err, &re) || re.Kind != "open_doc_revs_failed" || !strings.Contains(re.Reason, "request_uri_too_long")):
				t.Fatalf("err = %v, want open_doc_revs_failed request_uri_too_long", err)
			case !tc.wantFail && err != nil:
				t.Fatalf("Run: %v", err)
			case !tc.wantFail:
				if _, ok := s.contents(t, tgt)["big"]["2-"+strings.Repeat("f", 32)]; !ok {
					t.Error("the 2-rev of big is not on the target")
				}
			}
		})
	}
}

// TestGarbledOpenRevsPart: a source whose multipart open_revs answer holds a
// JSON part that does not parse fails the run with open_doc_revs_failed, as
// an unparsable JSON answer does, instead of taking the revision for one the
// source no longer has and checkpointing past it.
func TestGarbledOpenRevsPart(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	s.mustDo(t, "PUT", src+"/d", map[string]any{"v": 1})
	p := newFaultProxy(t, s)
	p.setFaults(func(_ int, r *http.Request, _ []byte) fault {
		if r.Method == "GET" && r.URL.Query().Get("open_revs") != "" {
			return garbledPart
		}
		return passThrough
	})
	rep := testRep(p.endpointServer(s), src, tgt)
	rep.UseBulkGet = false
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef"})
	var re *Error
	if !errors.As(err, &re) || re.Kind != "open_doc_revs_failed" {
		t.Fatalf("Run = %+v, %v; want an open_doc_revs_failed error", res, err)
	}
}
