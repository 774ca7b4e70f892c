package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// readOnly is the fault proxy's choice for a source its user may only
// read: every request that would change the db is refused with 403, as a
// Cloudant API key with `_reader` alone or a read-only gateway answers.
// CouchDB's own `_security` has no such user: a member may write `_local`
// docs, which validate_doc_update functions never see (minicouch alike).
func readOnly(_ int, r *http.Request, _ []byte) fault {
	seg := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return passThrough
	case r.Method == http.MethodPost && (seg == "_bulk_get" || seg == "_all_docs" || seg == "_changes" || seg == "_session"):
		return passThrough
	}
	return fail403
}

// TestReadOnlySource: a user who may only read the source replicates and
// resumes. Its checkpoint lives on the target alone, marked there, when the
// source refuses it (403) or when the replication asks for it
// ("checkpoint": "target", then nothing is asked of the source, writable
// or not); a restart resumes from it and fetches only what is new.
func TestReadOnlySource(t *testing.T) {
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("needs minicouch's _users and _security")
	}
	user := fmt.Sprintf("reader-%d", time.Now().UnixNano()%1e9)
	s.mustDo(t, "PUT", "_users/org.couchdb.user:"+user, map[string]any{"name": user, "password": "rpass", "roles": []string{}, "type": "user"})
	// localWritesOnly refuses the _local writes alone, as a gateway letting
	// every POST through would.
	localWritesOnly := func(n int, r *http.Request, body []byte) fault {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/_local/") {
			return fail403
		}
		return passThrough
	}
	tests := []struct {
		name     string
		mode     string
		readOnly func(n int, r *http.Request, body []byte) fault // nil: a writable source
	}{
		{"the source refuses every write", parse.CheckpointBoth, readOnly},
		{"the source refuses the _local write", parse.CheckpointBoth, localWritesOnly},
		{"checkpoint target, read-only source", parse.CheckpointTarget, readOnly},
		{"checkpoint target, writable source", parse.CheckpointTarget, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newFaultProxy(t, s)
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			s.mustDo(t, "PUT", src+"/_security", map[string]any{"admins": map[string]any{}, "members": map[string]any{"names": []string{user}}})
			addDocs(t, s, src, 0, 100)
			var mu sync.Mutex
			var sourceWrites []string // writes that reached the source
			var since []string        // the since of every _changes request
			p.setFaults(func(n int, r *http.Request, body []byte) fault {
				if strings.HasSuffix(r.URL.Path, "/_changes") {
					mu.Lock()
					since = append(since, r.URL.Query().Get("since"))
					mu.Unlock()
				}
				if tc.readOnly != nil {
					return tc.readOnly(n, r, body)
				}
				if readOnly(n, r, body) != passThrough {
					mu.Lock()
					sourceWrites = append(sourceWrites, r.Method+" "+r.URL.Path)
					mu.Unlock()
				}
				return passThrough
			})
			rep := testRep(s, src, tgt)
			rep.Source = parse.Endpoint{URL: p.srv.URL + "/" + src + "/", Auth: &parse.BasicAuth{Username: user, Password: "rpass"}}
			rep.Continuous, rep.Checkpoint, rep.ConnectionTimeout = true, tc.mode, 3000
			// The premise: the user is a member of the source, no admin. As in
			// CouchDB, that lets it write _local docs on minicouch itself; the
			// gateway is what refuses them.
			member := &testServer{Base: s.Base, User: user, Pass: "rpass"}
			var session struct {
				UserCtx struct {
					Name  string   `json:"name"`
					Roles []string `json:"roles"`
				} `json:"userCtx"`
			}
			_, body := member.do(t, "GET", "_session", nil)
			if json.Unmarshal(body, &session); session.UserCtx.Name != user || len(session.UserCtx.Roles) != 0 {
				t.Fatalf("the user's session: %s", body)
			}
			if status, body := member.do(t, "PUT", src+"/_local/probe", `{}`); status != 201 {
				t.Fatalf("minicouch refused a member's _local write, as CouchDB does not: %d %s", status, body)
			}
			if tc.readOnly != nil {
				if status, body := (&testServer{Base: p.srv.URL + "/", User: user, Pass: "rpass"}).do(t, "PUT", src+"/_local/probe", `{}`); status != 403 {
					t.Fatalf("the gateway let a _local write through: %d %s", status, body)
				}
			}
			id, err := ComputeRepID(context.Background(), rep, "0123456789abcdef0123456789abcdef", nil)
			if err != nil {
				t.Fatal(err)
			}
			var last Stats
			start := func() (context.CancelFunc, chan error) {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef",
						OnStats: func(st Stats) { mu.Lock(); last = st; mu.Unlock() }})
					done <- err
				}()
				return cancel, done
			}
			cancel, done := start()
			waitDocCount(t, s, tgt, 100)
			cancel()
			if err := <-done; !errors.Is(err, ErrStopped) {
				t.Fatalf("first run: %v, want ErrStopped with its checkpoint written", err)
			}
			var cp Checkpoint
			json.Unmarshal(s.mustDo(t, "GET", tgt+"/_local/"+id.Base, nil), &cp)
			if cp.Checkpoint != parse.CheckpointTarget || len(cp.History) == 0 {
				t.Errorf("target's checkpoint is marked %q with %d history entries: want one marked \"checkpoint\": \"target\"", cp.Checkpoint, len(cp.History))
			}
			if status, body := s.do(t, "GET", src+"/_local/"+id.Base, nil); status != 404 {
				t.Errorf("the source has a checkpoint: %d %s", status, body)
			}

			addDocs(t, s, src, 100, 130)
			p.resetCounts()
			mu.Lock()
			since = nil
			mu.Unlock()
			cancel, done = start()
			waitDocCount(t, s, tgt, 130)
			cancel()
			if err := <-done; !errors.Is(err, ErrStopped) {
				t.Fatalf("second run: %v, want ErrStopped", err)
			}
			mu.Lock()
			defer mu.Unlock()
			// Resumed from the target's checkpoint: its first read of the
			// source's changes starts there, not at 0 (from 0, _revs_diff
			// would still spare it fetching the 100 docs again).
			if len(since) == 0 || since[0] != seqString(cp.SourceLastSeq) {
				t.Errorf("the second run read the source's changes since %q, want the checkpoint's %s", since, cp.SourceLastSeq)
			}
			if got := p.fetched(); got != 30 {
				t.Errorf("the second run fetched %d revisions from the source, want 30", got)
			}
			if last.Checkpoint != parse.CheckpointTarget {
				t.Errorf("stats say checkpoint %q, want %q", last.Checkpoint, parse.CheckpointTarget)
			}
			if len(sourceWrites) > 0 {
				t.Errorf("with checkpoint target, writes reached the source: %v", sourceWrites)
			}
			if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
				t.Fatalf("target differs: %v", d)
			}
		})
	}
}
