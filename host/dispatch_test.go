package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
)

var (
	alice = hooks.UserCtx{Name: "alice", Roles: []string{"staff"}}
	admin = hooks.UserCtx{Name: "root", Roles: []string{"_admin"}}
)

// TestDispatchEveryHook drives every hook through a real docguard process.
func TestDispatchEveryHook(t *testing.T) {
	sum, err := checksum(docguardV1)
	if err != nil {
		t.Fatal(err)
	}
	h, srv := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1, SHA256: sum})
	ctx := context.Background()

	st := h.Plugins()
	if len(st) != 1 || st[0].Name != "docguard" || st[0].Version != "v1" || st[0].State != StateRunning || st[0].PID == 0 || st[0].SHA256 != sum {
		t.Fatalf("Plugins() = %+v", st)
	}

	srv.createDB("a_guarded")
	srv.createDB("plain")

	// before_doc_update: table of writes and expected outcomes.
	writes := []struct {
		name, db, doc string
		user          hooks.UserCtx
		want          *hooks.Error
	}{
		{"valid doc", "a_guarded", `{"_id":"d1","type":"t","owner":"alice","secret":"s"}`, alice, nil},
		{"missing owner", "a_guarded", `{"_id":"d2","type":"t"}`, alice,
			&hooks.Error{Status: 403, Err: "forbidden", Reason: `Document is missing required field "owner".`}},
		{"missing type", "a_guarded", `{"_id":"d3","owner":"x"}`, admin,
			&hooks.Error{Status: 403, Err: "forbidden", Reason: `Document is missing required field "type".`}},
		{"not an object", "a_guarded", `[1]`, alice,
			&hooks.Error{Status: 400, Err: "bad_request", Reason: "Document must be a JSON object"}},
		{"system user skips validation", "a_guarded", `{"_id":"d4"}`, hooks.SystemUser(), nil},
		{"unguarded db needs nothing", "plain", `{"_id":"p1","secret":"s"}`, alice, nil},
	}
	accepted := 0
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			_, err := srv.put(ctx, w.db, []byte(w.doc), w.user)
			if w.want == nil {
				if err != nil {
					t.Fatalf("put: %v", err)
				}
				if w.db == "a_guarded" {
					accepted++
				}
				return
			}
			var he *hooks.Error
			if !errors.As(err, &he) || *he != *w.want {
				t.Fatalf("put error = %#v, want %#v", err, w.want)
			}
		})
	}

	// after_doc_read: non-admins do not see "secret"; admins do; unsubscribed dbs untouched.
	reads := []struct {
		db, id     string
		user       hooks.UserCtx
		wantSecret bool
	}{
		{"a_guarded", "d1", alice, false},
		{"a_guarded", "d1", admin, true},
		{"plain", "p1", alice, true},
	}
	for _, r := range reads {
		doc, err := srv.get(ctx, r.db, r.id, r.user)
		if err != nil {
			t.Fatalf("get %s/%s: %v", r.db, r.id, err)
		}
		var body map[string]any
		json.Unmarshal(doc, &body)
		if _, has := body["secret"]; has != r.wantSecret || body["_id"] != r.id {
			t.Errorf("get %s/%s as %s = %s, want secret=%v", r.db, r.id, r.user.Name, doc, r.wantSecret)
		}
	}

	// after_doc_write and after_db_create/delete arrive asynchronously.
	eventually(t, 10*time.Second, "audit of a_guarded", func() bool {
		return stats(t, h).Audit["a_guarded"].Docs == accepted
	})
	srv.deleteDB("a_guarded")
	eventually(t, 10*time.Second, "after_db_delete", func() bool {
		s := stats(t, h)
		return s.Calls["after_db_delete"]["a_guarded"] == 1 && s.Calls["after_db_create"]["a_guarded"] == 1
	})
	if n := stats(t, h).Calls["db_updated"]["a_guarded"]; n < 1 || n > int64(accepted) {
		t.Errorf("db_updated reached the plugin %d times for %d writes", n, accepted)
	}

	// Subscription filtering: the unsubscribed db "plain" never reached the plugin.
	s := stats(t, h)
	for hook, perDB := range s.Calls {
		if n := perDB["plain"]; n != 0 {
			t.Errorf("%s was called %d times for unsubscribed db plain", hook, n)
		}
	}
	for _, hook := range hooks.All() {
		if h.Subscribed(hook, "plain") {
			t.Errorf("Subscribed(%s, plain) = true", hook)
		}
		if !h.Subscribed(hook, "x_guarded") {
			t.Errorf("Subscribed(%s, x_guarded) = false", hook)
		}
	}

	// Routes: method, path, query, headers, body and user reach the plugin.
	if !h.HasRoute("POST", "/_docguard/echo") || h.HasRoute("GET", "/_docguardian") {
		t.Error("HasRoute mismatch")
	}
	body := strings.Repeat("x", 100000)
	r := do(t, h, "POST", "/_docguard/echo?a=1&b=%2F", strings.NewReader(body), alice)
	var echo map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &echo); err != nil || r.Code != 200 {
		t.Fatalf("echo: %d %s", r.Code, r.Body.String())
	}
	digest := sha256.Sum256([]byte(body))
	if echo["method"] != "POST" || echo["query"] != "a=1&b=%2F" || echo["length"] != float64(len(body)) ||
		echo["sha256"] != hex.EncodeToString(digest[:]) {
		t.Errorf("echo = %v", echo)
	}
	if u, _ := echo["user"].(map[string]any); u["name"] != "alice" {
		t.Errorf("echo user = %v", echo["user"])
	}
	// The host adds what CouchDB sends with every JSON answer and the
	// plugin did not (docguard sets only Content-Type), errors included.
	for _, w := range []*httptest.ResponseRecorder{r, do(t, h, "GET", "/_docguard/nope", nil, alice), do(t, h, "GET", "/_other", nil, alice)} {
		if cc, id, bt := w.Header().Get("Cache-Control"), w.Header().Get("X-Couch-Request-ID"), w.Header().Get("X-CouchDB-Body-Time"); cc != "must-revalidate" || len(id) != 10 || bt != "0" {
			t.Errorf("%d answer: Cache-Control %q, X-Couch-Request-ID %q, X-CouchDB-Body-Time %q", w.Code, cc, id, bt)
		}
	}
	if w := do(t, h, "GET", "/_docguard/blob?size=3", nil, alice); w.Header().Get("Cache-Control") != "" {
		t.Errorf("a non-JSON answer got Cache-Control %q", w.Header().Get("Cache-Control"))
	}
	if r := do(t, h, "GET", "/_docguard/nope", nil, alice); r.Code != 404 || !strings.Contains(r.Body.String(), `"error":"not_found"`) {
		t.Errorf("unknown plugin path: %d %s", r.Code, r.Body.String())
	}
	if r := do(t, h, "GET", "/_other", nil, alice); r.Code != 404 {
		t.Errorf("no route: %d", r.Code)
	}

	// _active_tasks merges the plugin's tasks.
	tasks := h.ActiveTasks(ctx)
	if len(tasks) != 1 || !bytes.Contains(tasks[0], []byte(`"type":"docguard_audit"`)) {
		t.Errorf("ActiveTasks = %s", tasks)
	}

	// SetConfig changes what the plugin requires and subscribes to.
	h.SetConfig(ctx, hooks.Config{"docguard": {"dbs": "other_*", "required": "kind"}})
	srv.createDB("other_1")
	if _, err := srv.put(ctx, "other_1", []byte(`{"_id":"o"}`), alice); err == nil || !strings.Contains(err.Error(), `"kind"`) {
		t.Errorf("after SetConfig: put = %v, want missing kind", err)
	}
	if h.Subscribed(hooks.BeforeDocUpdate, "x_guarded") {
		t.Error("x_guarded still subscribed after SetConfig")
	}
}

// TestChecksumMismatch: a pinned binary that does not match is never started.
func TestChecksumMismatch(t *testing.T) {
	h, _ := newTestHost(t, Config{}, Spec{})
	sum, _ := checksum(docguardV1)
	want := strings.Repeat("ab", 32)
	err := h.Load(context.Background(), Spec{Path: docguardV1, SHA256: want})
	if err == nil {
		t.Fatal("Load succeeded with a wrong checksum")
	}
	for _, part := range []string{docguardV1, "checksum mismatch", want, sum, "not started"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %q", err, part)
		}
	}
	if len(h.Plugins()) != 0 {
		t.Errorf("Plugins() = %v after refused load", h.Plugins())
	}
	if err := h.Load(context.Background(), Spec{Path: docguardV1, SHA256: "xyz"}); err == nil || !strings.Contains(err.Error(), "64 hex") {
		t.Errorf("malformed pin: %v", err)
	}
}

// TestHookTimeout: a plugin hanging in before_doc_update is timed out and
// the write refused with 503, not hung; the plugin keeps serving.
func TestHookTimeout(t *testing.T) {
	h, srv := newTestHost(t, Config{HookTimeout: 300 * time.Millisecond,
		Config: guardConfig(map[string]string{"hang_for_tests": "true"})}, Spec{Path: docguardV1})
	srv.createDB("t_guarded")
	done := make(chan error, 1)
	go func() {
		_, err := srv.put(context.Background(), "t_guarded", []byte(`{"_id":"h","type":"t","owner":"o","_docguard_hang":true}`), alice)
		done <- err
	}()
	select {
	case err := <-done:
		var he *hooks.Error
		if !errors.As(err, &he) || he.Status != 503 || he.Err != "service_unavailable" || !strings.Contains(he.Reason, "did not answer") {
			t.Fatalf("hanging write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("write hung")
	}
	if _, err := srv.put(context.Background(), "t_guarded", []byte(`{"_id":"ok","type":"t","owner":"o"}`), alice); err != nil {
		t.Fatalf("write after timeout: %v", err)
	}
	if st := h.Plugins()[0].State; st != StateRunning {
		t.Errorf("state = %s", st)
	}
}

// TestStreamingRoute: a response far above gRPC's 4 MiB message limit
// streams through, and so does a large request body.
func TestStreamingRoute(t *testing.T) {
	h, _ := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	const size = 9<<20 + 123
	r := do(t, h, "GET", "/_docguard/blob?size="+itoa(size), nil, alice)
	if r.Code != 200 || r.Body.Len() != size || !r.Flushed {
		t.Fatalf("blob: status %d, %d bytes, flushed %v", r.Code, r.Body.Len(), r.Flushed)
	}
	b := r.Body.Bytes()
	for _, i := range []int{0, 1 << 20, size - 1} {
		if b[i] != 'a'+byte(i%(1<<20)%26) {
			t.Fatalf("byte %d = %q", i, b[i])
		}
	}
	big := bytes.Repeat([]byte("0123456789"), 600000) // 6 MB
	r = do(t, h, "PUT", "/_docguard/echo", bytes.NewReader(big), alice)
	var echo struct {
		Length int64  `json:"length"`
		Sum    string `json:"sha256"`
	}
	json.NewDecoder(io.Reader(r.Body)).Decode(&echo)
	digest := sha256.Sum256(big)
	if echo.Length != int64(len(big)) || echo.Sum != hex.EncodeToString(digest[:]) {
		t.Fatalf("echo of 6 MB body: %+v", echo)
	}
}

// TestUnsubscribedNoAlloc: hook calls for a db no plugin subscribed to
// make no RPC (see TestDispatchEveryHook) and allocate nothing.
func TestUnsubscribedNoAlloc(t *testing.T) {
	h, _ := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	ctx := context.Background()
	doc := []byte(`{"_id":"x"}`)
	ev := hooks.DocWrite{DB: "plain", DocID: "x", Rev: "1-a", Seq: "1", Doc: doc}
	allocs := testing.AllocsPerRun(1000, func() {
		for _, hook := range hooks.All() {
			if h.Subscribed(hook, "plain") {
				panic("subscribed")
			}
		}
		h.AfterDocWrite(ev)
		h.AfterDBCreate("plain", "u")
		if _, err := h.BeforeDocUpdate(ctx, "plain", doc, alice); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per unsubscribed write", allocs)
	}
}

// TestDBMatcher checks the precompiled matcher against hooks.MatchDB.
func TestDBMatcher(t *testing.T) {
	patterns := [][]string{{"*"}, {"_replicator", "*/_replicator"}, {"*_guarded", "audit_*"}, {"a*b*c"}, {"exact"}}
	dbs := []string{"", "_replicator", "a/_replicator", "a/b/_replicator", "x_guarded", "audit_1", "abc", "a1b2c", "exact", "exactly", "plain"}
	for _, ps := range patterns {
		var d dbMatcher
		for _, p := range ps {
			d.add(p)
		}
		for _, db := range dbs {
			want := false
			for _, p := range ps {
				want = want || hooks.MatchDB(p, db)
			}
			if got := d.match(db); got != want {
				t.Errorf("patterns %v, db %q: match = %v, want %v", ps, db, got, want)
			}
		}
	}
	for _, h := range append(hooks.All(), "bogus", "after_doc_wrote") {
		i := hookIndex(h)
		if h.Valid() != (i >= 0) || (i >= 0 && hooks.All()[i] != h) {
			t.Errorf("hookIndex(%q) = %d", h, i)
		}
	}
	if numHooks != len(hooks.All()) {
		t.Errorf("numHooks = %d, hooks.All() has %d", numHooks, len(hooks.All()))
	}
}
