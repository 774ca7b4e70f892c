package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
)

func newTestPool() *couchclient.Pool { return couchclient.NewPool(couchclient.PoolOptions{}) }

func hist(entries ...string) []json.RawMessage {
	out := []json.RawMessage{}
	for _, e := range entries {
		// "sess:seq"
		var sess, seq string
		fmt.Sscanf(e, "%s", &sess)
		for i := range e {
			if e[i] == ':' {
				sess, seq = e[:i], e[i+1:]
			}
		}
		b, _ := json.Marshal(map[string]any{"session_id": sess, "recorded_seq": seq, "docs_read": len(seq)})
		out = append(out, b)
	}
	return out
}

func TestCompareCheckpoints(t *testing.T) {
	cases := []struct {
		name     string
		src, tgt *Checkpoint
		want     string // start seq JSON, "" = from scratch
	}{
		{"no docs", nil, nil, ""},
		{"only source", &Checkpoint{SessionID: "a", SourceLastSeq: json.RawMessage(`"5"`)}, nil, ""},
		{"same session", &Checkpoint{SessionID: "a", SourceLastSeq: json.RawMessage(`"9"`), History: hist("a:9")},
			&Checkpoint{SessionID: "a", SourceLastSeq: json.RawMessage(`"9"`), History: hist("a:9")}, `"9"`},
		{"source head found in target history", &Checkpoint{SessionID: "c", History: hist("c:30", "b:20", "a:10")},
			&Checkpoint{SessionID: "x", History: hist("x:99", "c:30", "a:10")}, `"30"`},
		{"target head found in rest of source history", &Checkpoint{SessionID: "c", History: hist("c:30", "b:20", "a:10")},
			&Checkpoint{SessionID: "b", History: hist("b:20", "a:10")}, `"20"`},
		{"heads dropped until common", &Checkpoint{SessionID: "c", History: hist("c:30", "y:25", "a:10")},
			&Checkpoint{SessionID: "x", History: hist("x:99", "z:50", "a:10")}, `"10"`},
		{"foreign histories", &Checkpoint{SessionID: "c", History: hist("c:30", "b:20")},
			&Checkpoint{SessionID: "x", History: hist("x:99", "y:50")}, ""},
		{"empty target history", &Checkpoint{SessionID: "c", History: hist("c:30")},
			&Checkpoint{SessionID: "x"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sp := compareCheckpoints(tc.src, tc.tgt)
			if string(sp.seq) != tc.want {
				t.Fatalf("start seq %s, want %q", sp.seq, tc.want)
			}
		})
	}
}

// TestStartingPoint: where a run starts from the checkpoint docs, by the
// replication's `checkpoint` and the mark of a doc written on the target
// alone.
func TestStartingPoint(t *testing.T) {
	seq := func(s string) json.RawMessage { return json.RawMessage(`"` + s + `"`) }
	both := &Checkpoint{SessionID: "a", SourceLastSeq: seq("10"), History: hist("a:10")}
	// Written by session b on the target alone, after a's checkpoint on both.
	alone := &Checkpoint{SessionID: "b", SourceLastSeq: seq("40"), Checkpoint: parse.CheckpointTarget, History: hist("b:40", "a:10")}
	foreign := &Checkpoint{SessionID: "x", SourceLastSeq: seq("99"), History: hist("x:99")}
	cases := []struct {
		name     string
		mode     string
		src, tgt *Checkpoint
		want     string // start seq JSON, "" = from scratch
	}{
		{"default: both docs, CouchDB's rule", "", both, both, `"10"`},
		{"default: target alone, nothing on the source", "", nil, alone, `"40"`},
		{"default: target alone, the source's doc in its history", "", both, alone, `"40"`},
		{"default: target alone, the source's doc foreign", "", foreign, alone, ""},
		{"default: unmarked target, nothing on the source", "", nil, both, ""},
		{"target: the target's doc", parse.CheckpointTarget, nil, both, `"10"`},
		{"target: marked doc", parse.CheckpointTarget, nil, alone, `"40"`},
		{"target: none yet", parse.CheckpointTarget, nil, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{rep: &parse.Rep{Checkpoint: tc.mode}}
			sp := r.startingPoint(tc.src, tc.tgt)
			if string(sp.seq) != tc.want {
				t.Fatalf("start seq %s, want %q", sp.seq, tc.want)
			}
		})
	}
}

func TestCheckpointBodyHistoryCap(t *testing.T) {
	r := &run{sessionID: "s", startSeq: json.RawMessage(`0`)}
	r.rep = testRep(&testServer{Base: "http://127.0.0.1:1/"}, "a", "b")
	for i := 0; i < 60; i++ {
		r.history = append(r.history, json.RawMessage(fmt.Sprintf(`{"session_id":"old%d"}`, i)))
	}
	var cp Checkpoint
	if err := json.Unmarshal(r.checkpointBody(json.RawMessage(`"7"`), Stats{DocsWritten: 3}), &cp); err != nil {
		t.Fatal(err)
	}
	if len(cp.History) != maxHistory {
		t.Fatalf("history length %d, want %d", len(cp.History), maxHistory)
	}
	var head HistoryEntry
	json.Unmarshal(cp.History[0], &head)
	if head.SessionID != "s" || string(head.RecordedSeq) != `"7"` || head.DocsWritten != 3 || string(cp.SourceLastSeq) != `"7"` {
		t.Fatalf("head entry %+v", head)
	}
}

// TestCheckpointConflict: a checkpoint PUT that conflicts is accepted when the
// stored doc already holds what we wrote (a lost response), and fails otherwise.
//
// CouchDB 3 (and minicouch) no longer check the revs of _local docs; PouchDB
// and CouchDB 2 do. The client talks to the server through revChecker,
// which answers as those servers do, so the conflict path is exercised.
func TestCheckpointConflict(t *testing.T) {
	s := startServer(t)
	db := s.newDB(t, "cp")
	pool := newTestPool()
	defer pool.Close()
	ep := s.endpoint(db)
	ep.URL = revChecker(t, s) + db + "/"
	c := pool.Endpoint(ep, nil)
	ctx := context.Background()
	body := []byte(`{"session_id":"s1","source_last_seq":"5","replication_id_version":4,"history":[]}`)
	rev, err := writeCheckpoint(ctx, c, "source", "cpid", "", body)
	if err != nil || rev == "" {
		t.Fatalf("first write: rev %q err %v", rev, err)
	}
	again, err := writeCheckpoint(ctx, c, "source", "cpid", "", body)
	if err != nil || again != rev {
		t.Fatalf("replayed write: rev %q err %v, want accepted with %q", again, err, rev)
	}
	later := []byte(`{"session_id":"s1","source_last_seq":"7","replication_id_version":4,"history":[]}`)
	if _, err := writeCheckpoint(ctx, c, "source", "cpid", "", later); err != nil {
		t.Fatalf("write over our own session's doc with a stale rev: %v", err)
	}
	other := []byte(`{"session_id":"s2","source_last_seq":"9","replication_id_version":4,"history":[]}`)
	_, err = writeCheckpoint(ctx, c, "source", "cpid", "", other)
	if err == nil || err.Error() != "checkpoint_commit_failure: Error updating the source checkpoint document: conflict" {
		t.Fatalf("conflicting write: %v", err)
	}
}

// TestForeignCheckpoint: when the target's checkpoint shares no session with
// the source's, the replication starts over (every rev re-checked, nothing rewritten).
func TestForeignCheckpoint(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	addDocs(t, s, src, 0, 40)
	runRep(t, testRep(s, src, tgt), Options{})
	id, err := ComputeRepID(context.Background(), testRep(s, src, tgt), "0123456789abcdef0123456789abcdef", nil)
	if err != nil {
		t.Fatal(err)
	}
	var cur struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal(s.mustDo(t, "GET", tgt+"/_local/"+id.Base, nil), &cur)
	s.mustDo(t, "PUT", tgt+"/_local/"+id.Base, map[string]any{
		"_rev": cur.Rev, "session_id": "foreign", "source_last_seq": "999", "replication_id_version": 4,
		"history": []map[string]any{{"session_id": "foreign", "recorded_seq": "999"}},
	})
	addDocs(t, s, src, 40, 45)
	res := runRep(t, testRep(s, src, tgt), Options{})
	if res.Stats.RevisionsChecked != 45 || res.Stats.DocsWritten != 5 {
		t.Fatalf("after a foreign checkpoint: checked %d written %d, want 45 and 5", res.Stats.RevisionsChecked, res.Stats.DocsWritten)
	}
}

// revChecker is a proxy to base that refuses, with 409 as CouchDB 2 and
// PouchDB do, a PUT of a _local doc whose _rev is not the stored one.
func revChecker(t *testing.T, s *testServer) string {
	t.Helper()
	base := s.Base
	target, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/_local/") {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var doc struct {
				Rev string `json:"_rev"`
			}
			json.Unmarshal(body, &doc)
			get, _ := http.NewRequest(http.MethodGet, base+strings.TrimPrefix(r.URL.Path, "/"), nil)
			if s.User != "" {
				get.SetBasicAuth(s.User, s.Pass)
			}
			var cur struct {
				Rev string `json:"_rev"`
			}
			if resp, err := http.DefaultClient.Do(get); err == nil {
				json.NewDecoder(resp.Body).Decode(&cur)
				resp.Body.Close()
			}
			if cur.Rev != doc.Rev {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				io.WriteString(w, `{"error":"conflict","reason":"Document update conflict."}`)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}
