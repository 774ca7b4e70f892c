package replicate

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// seedSource fills db with plain docs, a conflicted doc, a deleted doc, a
// design doc, a _local doc and a doc with a small attachment.
func seedSource(t *testing.T, s *testServer, db string, n int) {
	docs := []map[string]any{}
	for i := 0; i < n; i++ {
		typ := "odd"
		if i%2 == 0 {
			typ = "even"
		}
		docs = append(docs, map[string]any{"_id": fmt.Sprintf("doc%03d", i), "n": i, "type": typ})
	}
	for _, id := range []string{"a/b", "sp ace+plus", "ünïcødé", "q?x&y=%z"} {
		docs = append(docs, map[string]any{"_id": id, "odd id": true})
	}
	s.bulk(t, db, true, docs...)
	// Conflicts: two branches written with new_edits=false.
	s.bulk(t, db, false,
		map[string]any{"_id": "conflicted", "_rev": "2-bbb", "branch": "b", "type": "odd", "_revisions": map[string]any{"start": 2, "ids": []string{"bbb", "aaa"}}},
		map[string]any{"_id": "conflicted", "_rev": "2-ccc", "branch": "c", "type": "odd", "_revisions": map[string]any{"start": 2, "ids": []string{"ccc", "aaa"}}},
	)
	var res struct {
		Rev string `json:"rev"`
	}
	json.Unmarshal(s.mustDo(t, "PUT", db+"/gone", map[string]any{"x": 1}), &res)
	s.mustDo(t, "DELETE", db+"/gone?rev="+res.Rev, nil)
	s.mustDo(t, "PUT", db+"/_local/secret", map[string]any{"x": 1})
	s.mustDo(t, "PUT", db+"/_design/f", map[string]any{
		"filters": map[string]any{"by_type": "function(doc, req) { return doc.type === req.query.type; }"},
	})
	s.mustDo(t, "PUT", db+"/withatt", map[string]any{
		"type": "even",
		"_attachments": map[string]any{"hello.txt": map[string]any{
			"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("hello world")),
		}},
	})
}

func TestOneShot(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	seedSource(t, s, src, 120)
	var lastStats Stats
	res := runRep(t, testRep(s, src, tgt), Options{OnStats: func(st Stats) { lastStats = st }})
	if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
		t.Fatalf("target differs from source:\n%s", strings.Join(d, "\n"))
	}
	if st, _ := s.do(t, "GET", tgt+"/_local/secret", nil); st != 404 {
		t.Errorf("_local doc replicated: status %d", st)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(res.Body, &body); err != nil {
		t.Fatalf("result body %s: %v", res.Body, err)
	}
	for _, k := range []string{"session_id", "source_last_seq", "replication_id_version", "history"} {
		if _, ok := body[k]; !ok {
			t.Errorf("result body lacks %q: %s", k, res.Body)
		}
	}
	// 120 docs + 4 odd ids + 2 conflict leaves + deleted + design + attachment doc
	if res.Stats.DocsWritten != 129 || res.Stats.DocsRead != 129 || res.Stats.DocWriteFailures != 0 {
		t.Errorf("stats %+v", res.Stats)
	}
	if lastStats.DocsWritten != res.Stats.DocsWritten {
		t.Errorf("OnStats last %+v, result %+v", lastStats, res.Stats)
	}
	// The checkpoint doc on the target reads back as ours.
	id, err := ComputeRepID(context.Background(), testRep(s, src, tgt), "0123456789abcdef0123456789abcdef", nil)
	if err != nil {
		t.Fatal(err)
	}
	var cp Checkpoint
	json.Unmarshal(s.mustDo(t, "GET", tgt+"/_local/"+id.Base, nil), &cp)
	if cp.ReplicationIDVersion != 4 || len(cp.History) != 1 || string(cp.SourceLastSeq) != string(body["source_last_seq"]) {
		t.Errorf("target checkpoint %+v", cp)
	}
	// A second run has nothing to do.
	res2 := runRep(t, testRep(s, src, tgt), Options{})
	if !strings.Contains(string(res2.Body), `"no_changes":true`) {
		t.Errorf("second run body %s", res2.Body)
	}
}

func TestFilters(t *testing.T) {
	s := startServer(t)
	src := s.newDB(t, "src")
	seedSource(t, s, src, 20)
	cases := []struct {
		name  string
		setup func(r *parse.Rep)
		want  func(id string) bool
	}{
		{"doc_ids", func(r *parse.Rep) { r.DocIDs = []string{"conflicted", "doc003", "nodoc"} },
			func(id string) bool { return id == "doc003" || id == "conflicted" }},
		// CouchDB copies nothing for an empty doc_ids list (no_changes).
		{"empty doc_ids", func(r *parse.Rep) { r.DocIDs = []string{} },
			func(id string) bool { return false }},
		{"selector", func(r *parse.Rep) { r.Selector = json.RawMessage(`{"type":"even"}`) },
			func(id string) bool { return id == "withatt" || strings.HasPrefix(id, "doc") && id[len(id)-1]%2 == 0 }},
		{"ddoc filter with query_params", func(r *parse.Rep) {
			r.Filter = "f/by_type"
			r.QueryParams = json.RawMessage(`{"type":"odd"}`)
		}, func(id string) bool {
			return id == "conflicted" || strings.HasPrefix(id, "doc") && id[len(id)-1]%2 == 1
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "selector" && s.Kind == "pouchdb-server" {
				t.Skip("pouchdb-server has no _changes?filter=_selector")
			}
			tgt := s.newDB(t, "tgt")
			rep := testRep(s, src, tgt)
			tc.setup(rep)
			runRep(t, rep, Options{})
			got := s.contents(t, tgt)
			want := s.contents(t, src)
			for id := range want {
				if !tc.want(id) {
					delete(want, id)
				}
			}
			if d := diffTrees(want, got, nil); len(d) > 0 {
				t.Fatalf("filtered target differs:\n%s", strings.Join(d, "\n"))
			}
		})
	}
	t.Run("missing filter", func(t *testing.T) {
		rep := testRep(s, src, s.newDB(t, "tgt"))
		rep.Filter = "f/nope"
		_, err := Run(context.Background(), rep, Options{})
		var re *Error
		if !errors.As(err, &re) || re.Kind != "filter_fetch_error" {
			t.Fatalf("err = %v, want filter_fetch_error", err)
		}
	})
}

func TestSinceWinningCreateTarget(t *testing.T) {
	s := startServer(t)
	src := s.newDB(t, "src")
	seedSource(t, s, src, 10)
	t.Run("since_seq", func(t *testing.T) {
		var ch struct {
			Results []struct {
				Seq json.RawMessage `json:"seq"`
				ID  string          `json:"id"`
			} `json:"results"`
		}
		json.Unmarshal(s.mustDo(t, "GET", src+"/_changes", nil), &ch)
		mid := ch.Results[4].Seq
		tgt := s.newDB(t, "tgt")
		rep := testRep(s, src, tgt)
		rep.SinceSeq = mid
		runRep(t, rep, Options{})
		got := s.contents(t, tgt)
		for _, r := range ch.Results[:5] {
			if _, ok := got[r.ID]; ok {
				t.Errorf("%s before since_seq was replicated", r.ID)
			}
		}
		for _, r := range ch.Results[5:] {
			if _, ok := got[r.ID]; !ok {
				t.Errorf("%s after since_seq missing", r.ID)
			}
		}
	})
	t.Run("winning_revs_only", func(t *testing.T) {
		tgt := s.newDB(t, "tgt")
		rep := testRep(s, src, tgt)
		rep.WinningRevsOnly = true
		runRep(t, rep, Options{})
		got := s.contents(t, tgt)
		if len(got["conflicted"]) != 1 {
			t.Errorf("conflicted has %d leaves on target, want 1", len(got["conflicted"]))
		}
	})
	t.Run("create_target", func(t *testing.T) {
		tgt := fmt.Sprintf("created-%d", time.Now().UnixNano())
		rep := testRep(s, src, tgt)
		rep.CreateTarget = true
		runRep(t, rep, Options{})
		if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
			t.Fatalf("created target differs:\n%s", strings.Join(d, "\n"))
		}
	})
	t.Run("missing target", func(t *testing.T) {
		rep := testRep(s, src, "nosuchdb")
		_, err := Run(context.Background(), rep, Options{})
		var re *Error
		want := "db_not_found: could not open " + s.Base + "nosuchdb/"
		if !errors.As(err, &re) || err.Error() != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
	})
	t.Run("use_checkpoints false", func(t *testing.T) {
		rep := testRep(s, src, s.newDB(t, "tgt"))
		rep.UseCheckpoints = false
		res := runRep(t, rep, Options{})
		if string(res.Body) != `{"use_checkpoints":false}` {
			t.Errorf("body %s", res.Body)
		}
	})
}

// TestCrashReasons: start-up failures in CouchDB's words, never with a password.
func TestCrashReasons(t *testing.T) {
	s := startServer(t)
	src := s.newDB(t, "src")
	cases := []struct {
		name string
		rep  func() *parse.Rep
		want string
	}{
		{"missing source", func() *parse.Rep { return testRep(s, "nosuchsrc", src) },
			"db_not_found: could not open " + s.Base + "nosuchsrc/"},
		{"unreachable source", func() *parse.Rep {
			r := testRep(s, src, src)
			r.Source.URL = "http://127.0.0.1:1/db/"
			r.RetriesPerRequest = 0
			return r
		}, "db_not_found: could not open http://127.0.0.1:1/db/: connection refused"},
		{"wrong password", func() *parse.Rep {
			r := testRep(s, src, src)
			r.Source.Auth = &parse.BasicAuth{Username: "nobody", Password: "wrong-secret"}
			return r
		}, "unauthorized: unauthorized to access or create database " + s.Base + src + "/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "wrong password" && s.User == "" {
				t.Skip("far end has no authentication")
			}
			_, err := Run(context.Background(), tc.rep(), Options{})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v\nwant  %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "wrong-secret") || strings.Contains(err.Error(), s.Pass+"@") {
				t.Fatalf("password in %v", err)
			}
		})
	}
}

// TestDocIDsConflictCounters (issue #33 item 7): CouchDB's own "replication
// by doc ids" steps. One id is replicated, then source and target each
// gain a conflicting revision and the same replication runs again: it
// reads and writes the one missing revision, and its counters, like
// CouchDB 3.5.0's (measured side by side), add up the runs that share the
// checkpoint: docs_read 2, docs_written 2. A fresh replication of the
// conflicted doc counts 1 and 1.
func TestDocIDsConflictCounters(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	p := newFaultProxy(t, s)
	var written int // revisions sent to the target
	p.setFaults(func(_ int, r *http.Request, body []byte) fault {
		switch {
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/_bulk_docs"):
			var v struct {
				Docs []json.RawMessage `json:"docs"`
			}
			json.Unmarshal(body, &v)
			written += len(v.Docs)
		case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/"+tgt+"/") && !strings.Contains(r.URL.Path, "/_local/"):
			written++
		}
		return passThrough
	})
	ps := p.endpointServer(s)
	winner := func(db string) string {
		var d struct {
			Rev string `json:"_rev"`
		}
		json.Unmarshal(s.mustDo(t, "GET", db+"/x", nil), &d)
		return d.Rev
	}
	type counters struct{ read, written, sent int64 }
	run := func(rep *parse.Rep) counters {
		t.Helper()
		p.mu.Lock()
		written = 0
		p.mu.Unlock()
		res := runRep(t, rep, Options{})
		// CouchDB's order: the doc_ids replication's own members before the history.
		want := "session_id source_last_seq replication_id_version start_time end_time docs_read docs_written doc_write_failures history"
		if got := strings.Join(memberNames(t, res.Body), " "); got != want {
			t.Errorf("result members %s, want %s", got, want)
		}
		var body struct {
			DocsRead    int64 `json:"docs_read"`
			DocsWritten int64 `json:"docs_written"`
		}
		json.Unmarshal(res.Body, &body)
		p.mu.Lock()
		defer p.mu.Unlock()
		return counters{body.DocsRead, body.DocsWritten, int64(written)}
	}
	byID := func() *parse.Rep {
		rep := testRep(ps, src, tgt)
		rep.DocIDs = []string{"x"}
		return rep
	}
	s.mustDo(t, "PUT", src+"/x", map[string]any{"integer": 1})
	if got := run(byID()); got != (counters{1, 1, 1}) {
		t.Fatalf("first run: %+v, want 1 read, 1 written, 1 sent", got)
	}
	s.mustDo(t, "PUT", src+"/x", map[string]any{"_rev": winner(src), "integer": 101})
	var tgtRev struct {
		Rev string `json:"rev"`
	}
	json.Unmarshal(s.mustDo(t, "PUT", tgt+"/x", map[string]any{"_rev": winner(tgt), "integer": 2}), &tgtRev)
	if got := run(byID()); got != (counters{2, 2, 1}) {
		t.Fatalf("run after the conflict: %+v, want 2 read, 2 written (both runs), 1 sent", got)
	}
	if leaves := s.contents(t, tgt)["x"]; len(leaves) != 2 {
		t.Fatalf("target x has %d leaves, want the two conflicting ones", len(leaves))
	}
	// A replication of its own (another target) of the conflicted source doc.
	tgt2 := s.newDB(t, "tgt")
	s.bulk(t, tgt2, false, map[string]any{"_id": "x", "_rev": tgtRev.Rev, "integer": 2})
	rep := testRep(ps, src, tgt2)
	rep.DocIDs = []string{"x"}
	if got := run(rep); got.read != 1 || got.written != 1 {
		t.Fatalf("fresh run: %+v, want 1 read, 1 written", got)
	}
}

// memberNames lists the names of a JSON object's members in their order.
func memberNames(t *testing.T, obj json.RawMessage) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", obj)
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", obj, err)
		}
		names = append(names, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("%s: %v", obj, err)
		}
	}
	return names
}
