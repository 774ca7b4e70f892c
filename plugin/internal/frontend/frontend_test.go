package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// memServices is a test fixture: hooks.Services over in-memory dbs.
type memServices struct {
	mu  sync.Mutex
	dbs map[string]*memDB
}

type memDB struct {
	uuid    string
	seq     int
	docs    map[string][]byte
	changes []hooks.Change // one row per doc, latest seq
}

func newMemServices() *memServices { return &memServices{dbs: map[string]*memDB{}} }

func (m *memServices) createDB(name, uuid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dbs[name] = &memDB{uuid: uuid, docs: map[string][]byte{}}
}

// put stores a doc (nil body = delete) and returns the write event.
func (m *memServices) put(db, id string, body []byte) hooks.DocWrite {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dbs[db]
	d.seq++
	seq := strconv.Itoa(d.seq)
	if body == nil {
		delete(d.docs, id)
	} else {
		d.docs[id] = body
	}
	for i, c := range d.changes {
		if c.ID == id {
			d.changes = append(d.changes[:i], d.changes[i+1:]...)
			break
		}
	}
	d.changes = append(d.changes, hooks.Change{Seq: seq, ID: id, Revs: []string{"1-x"}, Deleted: body == nil})
	return hooks.DocWrite{DB: db, DBUUID: d.uuid, DocID: id, Seq: seq, Deleted: body == nil, Doc: body}
}

func (m *memServices) ServerInfo(context.Context) (hooks.ServerInfo, error) {
	return hooks.ServerInfo{UUID: "0123456789abcdef0123456789abcdef", Node: "nonode@nohost", URL: "http://127.0.0.1:5984/"}, nil
}

func (m *memServices) ListDBs(context.Context) ([]hooks.DBInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []hooks.DBInfo
	for n, d := range m.dbs {
		out = append(out, hooks.DBInfo{Name: n, UUID: d.uuid, UpdateSeq: strconv.Itoa(d.seq)})
	}
	return out, nil
}

func (m *memServices) Changes(_ context.Context, db, since string, limit int) (hooks.ChangesPage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dbs[db]
	if !ok {
		return hooks.ChangesPage{}, hooks.NotFound("Database does not exist.")
	}
	s, _ := strconv.Atoi(since)
	var page hooks.ChangesPage
	page.LastSeq = since
	for _, c := range d.changes {
		n, _ := strconv.Atoi(c.Seq)
		if n <= s {
			continue
		}
		if len(page.Results) == limit {
			page.Pending++
			continue
		}
		page.Results = append(page.Results, c)
		page.LastSeq = c.Seq
	}
	return page, nil
}

func (m *memServices) GetDoc(_ context.Context, db, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.dbs[db]; ok {
		if b, ok := d.docs[id]; ok {
			return b, nil
		}
	}
	return nil, hooks.NotFound("missing")
}

func (m *memServices) UpdateDoc(_ context.Context, db string, doc []byte) (string, error) {
	var d struct {
		ID string `json:"_id"`
	}
	json.Unmarshal(doc, &d)
	m.put(db, d.ID, doc)
	return "2-x", nil
}

type fixture struct {
	t   *testing.T
	svc *memServices
	q   *jobs.Queue
	f   *Frontend
	ctx context.Context
	// clock is the frontend's time: tests move it with advance.
	clock atomic.Int64 // unix nanoseconds
}

// advance moves the fixture's clock forward by d.
func (fx *fixture) advance(d time.Duration) { fx.clock.Add(int64(d)) }

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOn(t, kv.NewMemory())
}

// newFixtureOn is newFixture with the queue in store.
func newFixtureOn(t *testing.T, store kv.Store) *fixture {
	t.Helper()
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	ctx := context.Background()
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	svc := newMemServices()
	svc.createDB("_replicator", "uuid1")
	uuid := "0123456789abcdef0123456789abcdef"
	fx := &fixture{t: t, svc: svc, q: q, ctx: ctx}
	fx.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	fx.f = New(Config{Queue: q, Keys: testKeys, Services: svc, ServerUUID: uuid, LocalURL: "http://127.0.0.1:5984/",
		Now: func() time.Time { return time.Unix(0, fx.clock.Load()) },
		RepID: func(_ context.Context, rep *parse.Rep) (parse.RepID, error) {
			return parse.ReplicationID(rep, uuid, ""), nil
		}})
	return fx
}

// jobs returns job id → record.
func (fx *fixture) jobs() map[string]*jobdata.Record {
	out := map[string]*jobdata.Record{}
	if err := fx.f.recs.Fold(fx.ctx, func(id string, r *jobdata.Record) error { out[id] = r; return nil }); err != nil {
		fx.t.Fatal(err)
	}
	return out
}

func (fx *fixture) write(db, id, body string) {
	fx.t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	if err := fx.f.AfterDocWrite(fx.ctx, fx.svc.put(db, id, b)); err != nil {
		fx.t.Fatal(err)
	}
}

const repDoc = `{"_id":"%s","source":"http://a:pw@127.0.0.1:5984/src","target":"http://127.0.0.1:5984/%s"%s}`

func doc(id, tgt, extra string) string { return fmt.Sprintf(repDoc, id, tgt, extra) }

func TestDocEvents(t *testing.T) {
	fx := newFixture(t)
	job := parse.PersistentJobID("uuid1", "r1")

	fx.write("_replicator", "r1", doc("r1", "t1", ""))
	js := fx.jobs()
	if len(js) != 1 || js[job] == nil || js[job].State != jobdata.Pending || js[job].Rep.Target.URL != "http://127.0.0.1:5984/t1/" {
		t.Fatalf("after create: %+v", js)
	}
	added := js[job].StartTime

	// A non-replication field changes nothing.
	fx.write("_replicator", "r1", doc("r1", "t1", `,"note":"x"`))
	if js := fx.jobs(); len(js[job].History) != 1 || js[job].StartTime != added {
		t.Fatalf("no-op update restarted the job: %+v", js[job])
	}
	// A new target replaces the job (StartTime has whole seconds).
	fx.advance(time.Second)
	fx.write("_replicator", "r1", doc("r1", "t2", ""))
	if js := fx.jobs(); js[job].Rep.Target.URL != "http://127.0.0.1:5984/t2/" || js[job].StartTime == added {
		t.Fatalf("update not applied: %+v", js[job])
	}
	// Design docs and completed docs are ignored.
	fx.write("_replicator", "_design/x", `{"_id":"_design/x"}`)
	fx.write("_replicator", "done", doc("done", "t3", `,"_replication_state":"completed"`))
	if js := fx.jobs(); len(js) != 1 {
		t.Fatalf("ignored docs made jobs: %v", js)
	}
	// A doc that does not parse becomes a failed job with the reason.
	fx.write("_replicator", "bad", `{"_id":"bad","source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t","worker_processes":"a few"}`)
	bad := fx.jobs()[parse.PersistentJobID("uuid1", "bad")]
	if bad == nil || bad.State != jobdata.Failed || !strings.Contains(bad.ErrorReason(), "worker_processes") {
		t.Fatalf("bad doc: %+v", bad)
	}
	// Deleting the doc removes the job.
	fx.write("_replicator", "r1", "")
	if js := fx.jobs(); js[job] != nil {
		t.Fatalf("deleted doc kept its job")
	}
}

// TestDocBeforeQueueSetUp: a doc written to an api_frontend before any
// replication node set the queue's job type up is not failed: the write
// event fails (the host catches the db up later) and the doc becomes a job
// once the type exists. (In a cluster whose replication node set the type
// up between two attempts, the doc was failed for good with "its job
// cannot be stored: jobs: no_type_timeout": TestE2EClusterParkedJobsWake.)
func TestDocBeforeQueueSetUp(t *testing.T) {
	fx := newFixture(t)
	if err := fx.q.ClearTypeTimeout(fx.ctx, jobdata.JobType); err != nil {
		t.Fatal(err)
	}
	ev := fx.svc.put("_replicator", "early", []byte(doc("early", "t1", "")))
	if err := fx.f.AfterDocWrite(fx.ctx, ev); !errors.Is(err, jobs.ErrNoTypeTimeout) {
		t.Fatalf("write before the queue is set up: %v", err)
	}
	if js := fx.jobs(); len(js) != 0 {
		t.Fatalf("jobs before the queue is set up: %v", js)
	}
	if err := fx.q.SetTypeTimeout(fx.ctx, jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := fx.f.CatchUp(fx.ctx, "_replicator"); err != nil {
		t.Fatal(err)
	}
	j := fx.jobs()[parse.PersistentJobID("uuid1", "early")]
	if j == nil || j.State != jobdata.Pending {
		t.Fatalf("after the catch-up: %+v", j)
	}
}

func TestCatchUp(t *testing.T) {
	fx := newFixture(t)
	// Writes whose events were lost.
	for i := 0; i < 1203; i++ {
		id := fmt.Sprintf("d%04d", i)
		fx.svc.put("_replicator", id, []byte(doc(id, id, "")))
	}
	fx.svc.put("_replicator", "d0001", nil)
	fx.svc.createDB("a/b/_replicator", "uuid2")
	fx.svc.put("a/b/_replicator", "x", []byte(doc("x", "tx", "")))
	if err := fx.f.StartCatchUp(fx.ctx); err != nil {
		t.Fatal(err)
	}
	js := fx.jobs()
	if len(js) != 1203 || js[parse.PersistentJobID("uuid1", "d0001")] != nil || js[parse.PersistentJobID("uuid2", "x")] == nil {
		t.Fatalf("after catch-up: %d jobs", len(js))
	}
	// Only what changed since is read again.
	fx.svc.put("_replicator", "d0002", nil)
	if err := fx.f.CatchUp(fx.ctx, "_replicator"); err != nil {
		t.Fatal(err)
	}
	if js := fx.jobs(); len(js) != 1202 {
		t.Fatalf("after second catch-up: %d jobs", len(js))
	}
	// A replicator db deleted while the plugin was down: its jobs go at start.
	fx.svc.mu.Lock()
	delete(fx.svc.dbs, "a/b/_replicator")
	fx.svc.mu.Unlock()
	if err := fx.f.StartCatchUp(fx.ctx); err != nil {
		t.Fatal(err)
	}
	if js := fx.jobs(); len(js) != 1201 || js[parse.PersistentJobID("uuid2", "x")] != nil {
		t.Fatalf("deleted db kept jobs: %d", len(js))
	}
	// A db recreated with a new uuid: old jobs removed, new ones read from the start.
	fx.svc.createDB("_replicator", "uuid3")
	fx.svc.put("_replicator", "n", []byte(doc("n", "tn", "")))
	if err := fx.f.AfterDBCreate(fx.ctx, "_replicator", "uuid3"); err != nil {
		t.Fatal(err)
	}
	if js := fx.jobs(); len(js) != 1 || js[parse.PersistentJobID("uuid3", "n")] == nil {
		t.Fatalf("recreated db: %d jobs", len(js))
	}
	if err := fx.f.AfterDBDelete(fx.ctx, "_replicator", "uuid3"); err != nil {
		t.Fatal(err)
	}
	if js := fx.jobs(); len(js) != 0 {
		t.Fatalf("db delete left %d jobs", len(js))
	}
}

func TestValidation(t *testing.T) {
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	bob := hooks.UserCtx{Name: "bob", Roles: []string{}}
	tests := []struct {
		name    string
		doc     string
		user    hooks.UserCtx
		status  int
		reason  string
		wantSub string
	}{
		{"valid gets owner", doc("a", "t", ""), admin, 0, "", `"owner":"admin"`},
		{"system user unchanged", `{"_id":"x","foo":1}`, hooks.SystemUser(), 0, "", `{"_id":"x","foo":1}`},
		{"empty doc", `{"_id":"x"}`, admin, 403, "", ""},
		{"bad worker_processes", doc("a", "t", `,"worker_processes":"a few"`), admin, 403, "worker_processes", ""},
		{"other user's doc", doc("a", "t", `,"owner":"admin"`), bob, 403, "Can't update replication documents from other users.", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := BeforeDocUpdate("_replicator", []byte(tt.doc), tt.user, parse.DefaultOptions(), nil)
			if tt.status == 0 {
				if err != nil || !strings.Contains(string(out), tt.wantSub) {
					t.Fatalf("got %s, %v", out, err)
				}
				return
			}
			he, ok := err.(*hooks.Error)
			if !ok || he.Status != tt.status || he.Err != "forbidden" || !strings.Contains(he.Reason, tt.reason) {
				t.Fatalf("got %s, %v", out, err)
			}
		})
	}
	stored := `{"_id":"a","_rev":"1-abc","source":"http://u:secret@h/db","target":"http://h/t","owner":"admin"}`
	if out := AfterDocRead([]byte(stored), bob); strings.Contains(string(out), "secret") {
		t.Fatalf("non-owner sees credentials: %s", out)
	}
	if out := AfterDocRead([]byte(stored), admin); string(out) != stored {
		t.Fatalf("admin sees a changed doc: %s", out)
	}
}

func post(fx *fixture, body string, user hooks.UserCtx) (int, string) {
	req := httptest.NewRequest(http.MethodPost, "/_replicate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	fx.f.Replicate(w, req, user)
	return w.Code, strings.TrimSpace(w.Body.String())
}

func TestReplicateContinuousAndCancel(t *testing.T) {
	fx := newFixture(t)
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	bob := hooks.UserCtx{Name: "bob", Roles: []string{}}
	body := `{"source":"http://admin:pass@127.0.0.1:5984/src","target":"http://admin:pass@127.0.0.1:5984/tgt8","continuous":true,"create_target":true}`
	code, resp := post(fx, body, admin)
	if code != 202 || !strings.HasPrefix(resp, `{"ok":true,"_local_id":"`) || !strings.HasSuffix(resp, `+continuous+create_target"}`) {
		t.Fatalf("continuous: %d %s", code, resp)
	}
	var r struct {
		LocalID string `json:"_local_id"`
	}
	json.Unmarshal([]byte(resp), &r)
	if n := len(fx.jobs()); n != 1 {
		t.Fatalf("%d jobs", n)
	}
	// Posting the same again reuses the job.
	if code, _ := post(fx, body, admin); code != 202 || len(fx.jobs()) != 1 {
		t.Fatalf("repost: %d, %d jobs", code, len(fx.jobs()))
	}
	tests := []struct {
		name   string
		body   string
		user   hooks.UserCtx
		code   int
		answer string
	}{
		{"unknown id", `{"replication_id":"nonexistent","cancel":true}`, admin, 404, `{"error":"not_found","reason":"missing"}`},
		{"other user", strings.Replace(body, `"continuous":true`, `"continuous":true,"cancel":true`, 1), bob, 401, `{"error":"unauthorized","reason":"You are not a server admin."}`},
		{"bad content", `{"source":"http://h/a","target":"http://h/b","worker_processes":"a few"}`, admin, 400, `"error":"bad_request"`},
		{"missing source", `{}`, admin, 400, "{\"error\":\"bad_request\",\"reason\":\"Missing `source` field\"}"},
		{"anonymous", body, hooks.UserCtx{}, 401, `"error":"unauthorized"`},
	}
	for _, tt := range tests {
		if code, resp := post(fx, tt.body, tt.user); code != tt.code || !strings.Contains(resp, tt.answer) {
			t.Errorf("%s: %d %s, want %d %s", tt.name, code, resp, tt.code, tt.answer)
		}
	}
	// The job was not resolved by the rep id index yet (it never ran): cancel by the same body.
	code, resp = post(fx, strings.Replace(body, `"continuous":true`, `"continuous":true,"cancel":true`, 1), admin)
	if code != 200 || resp != `{"ok":true,"_local_id":"`+r.LocalID+`"}` {
		t.Fatalf("cancel: %d %s", code, resp)
	}
	if n := len(fx.jobs()); n != 0 {
		t.Fatalf("cancel left %d jobs", n)
	}
}

// TestReplicateCancelByRepID: a _replicate job is found by its replication
// id, also with its "+" turned into spaces (form decoding), from the moment
// it is added, before it first runs (issue #33 item 3).
func TestReplicateCancelByRepID(t *testing.T) {
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	body := `{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t","continuous":true}`
	for _, key := range []string{"replication_id", "_local_id", "id"} {
		for _, spaces := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s spaces=%v", key, spaces), func(t *testing.T) {
				fx := newFixture(t)
				_, resp := post(fx, body, admin)
				var r struct {
					LocalID string `json:"_local_id"`
				}
				json.Unmarshal([]byte(resp), &r)
				id := r.LocalID
				if spaces {
					id = strings.ReplaceAll(id, "+", " ")
				}
				if rec, err := fx.f.recs.Lookup(fx.ctx, id); err != nil || rec.RepID != r.LocalID {
					t.Fatalf("lookup of %q before the job ran: %+v, %v", id, rec, err)
				}
				code, resp := post(fx, `{"`+key+`":"`+id+`","cancel":true}`, admin)
				if code != 200 || resp != `{"ok":true,"_local_id":"`+r.LocalID+`"}` || len(fx.jobs()) != 0 {
					t.Fatalf("cancel by %s %q: %d %s, %d jobs left", key, id, code, resp, len(fx.jobs()))
				}
				if code, _ := post(fx, `{"`+key+`":"`+id+`","cancel":true}`, admin); code != 404 {
					t.Fatalf("second cancel: %d, want 404", code)
				}
			})
		}
	}
}

func TestReplicateOneShotWaits(t *testing.T) {
	fx := newFixture(t)
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	body := `{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t"}`
	type answer struct {
		code int
		resp string
	}
	got := make(chan answer, 1)
	go func() {
		c, r := post(fx, body, admin)
		got <- answer{c, r}
	}()
	// Complete the job as a runner does.
	ctx, cancel := context.WithTimeout(fx.ctx, 5*time.Second)
	defer cancel()
	job, err := fx.q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := jobdata.Decode(job.Data, testKeys, job.ID)
	rec.State = jobdata.Completed
	rec.CheckpointHistory = json.RawMessage(`{"session_id":"s1","source_last_seq":"3","replication_id_version":4,"history":[]}`)
	if err := fx.q.Finish(ctx, job, rec.Encode(testKeys, job.ID)); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a.code != 200 || a.resp != `{"ok":true,"session_id":"s1","source_last_seq":"3","replication_id_version":4,"history":[]}` {
			t.Fatalf("one-shot answer %d %s", a.code, a.resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("one-shot did not answer")
	}
}

func TestBatchedEvents(t *testing.T) {
	fx := newFixture(t)
	// A delivery of 2500 events is applied in batches of maxBatch; only
	// each doc's last version counts.
	var evs []hooks.DocWrite
	for i := 0; i < 2500; i++ {
		id := fmt.Sprintf("b%d", i%300)
		body := []byte(doc(id, fmt.Sprintf("t%d", i), ""))
		if i%300 == 7 && i > 2000 {
			body = nil // the last version of b7 is a deletion
		}
		evs = append(evs, fx.svc.put("_replicator", id, body))
	}
	if err := fx.f.AfterDocWrites(fx.ctx, "_replicator", evs); err != nil {
		t.Fatal(err)
	}
	js := fx.jobs()
	if len(js) != 299 || js[parse.PersistentJobID("uuid1", "b7")] != nil {
		t.Fatalf("%d jobs after batched events", len(js))
	}
	if got := js[parse.PersistentJobID("uuid1", "b10")].Rep.Target.URL; got != "http://127.0.0.1:5984/t2410/" {
		t.Fatalf("b10 targets %s, want its last version's t2410", got)
	}
	var pos jobstore.DBSeq
	fx.q.Transact(fx.ctx, func(tx *jobs.Tx) error { pos, _ = jobstore.GetDBSeq(tx.KV(), "_replicator"); return nil })
	if pos.Seq != "2500" || pos.UUID != "uuid1" {
		t.Fatalf("stored position %+v, want seq 2500", pos)
	}
}

// TestSettle: Settle waits while a replicator db has writes the frontend
// has not made jobs of, and returns at once when it has.
func TestSettle(t *testing.T) {
	fx := newFixture(t)
	if !fx.f.Settle(fx.ctx, time.Second) {
		t.Fatal("an empty replicator db is not settled")
	}
	fx.write("_replicator", "r1", doc("r1", "t1", ""))
	if !fx.f.Settle(fx.ctx, time.Second) {
		t.Fatal("not settled after the write's event was applied")
	}
	// A write whose event has not reached the frontend yet.
	ev := fx.svc.put("_replicator", "r2", []byte(doc("r2", "t2", "")))
	// A deadline reached before the first read (a loaded machine) is not
	// a reason to call it settled.
	if fx.f.Settle(fx.ctx, 0) {
		t.Fatal("settled with no time to read")
	}
	start := time.Now()
	if fx.f.Settle(fx.ctx, 100*time.Millisecond) {
		t.Fatal("settled although r2 is not a job")
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Fatalf("gave up after %v, not the 100ms asked", waited)
	}
	done := make(chan bool)
	go func() { done <- fx.f.Settle(fx.ctx, 5*time.Second) }()
	time.Sleep(30 * time.Millisecond)
	if err := fx.f.AfterDocWrite(fx.ctx, ev); err != nil {
		t.Fatal(err)
	}
	if !<-done {
		t.Fatal("Settle did not see the event applied")
	}
	if fx.jobs()[parse.PersistentJobID("uuid1", "r2")] == nil {
		t.Fatal("no job for r2")
	}
}

// TestReplicateOneShotFailures: a one-shot whose job failed is answered
// with the status CouchDB 3.5 gives the failure: 401 and 403 when an
// endpoint refused the credentials, 404 for a filter, else 500.
func TestReplicateOneShotFailures(t *testing.T) {
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	tests := []struct {
		kind, reason string
		code         int
		answer       string
	}{
		{"forbidden", "forbidden: forbidden to access database http://127.0.0.1:5984/src/", 403,
			`{"error":"forbidden","reason":"forbidden to access database http://127.0.0.1:5984/src/"}`},
		{"unauthorized", "unauthorized: unauthorized to access or create database http://127.0.0.1:5984/t/", 401,
			`{"error":"unauthorized","reason":"unauthorized to access or create database http://127.0.0.1:5984/t/"}`},
		{"filter_fetch_error", "filter_fetch_error: Could not find filter function `f` in design document `_design/d`", 404,
			"{\"error\":\"not_found\",\"reason\":\"Could not find filter function `f` in design document `_design/d`\"}"},
		{"db_not_found", "db_not_found: could not open http://127.0.0.1:5984/src/", 500,
			`{"error":"db_not_found","reason":"could not open http://127.0.0.1:5984/src/"}`},
		{"", "Duplicate job running: x", 500, `{"error":"error","reason":"Duplicate job running: x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			fx := newFixture(t)
			got := make(chan [2]string, 1)
			go func() {
				c, r := post(fx, `{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t"}`, admin)
				got <- [2]string{strconv.Itoa(c), r}
			}()
			// Fail the job as the job server does.
			ctx, cancel := context.WithTimeout(fx.ctx, 5*time.Second)
			defer cancel()
			job, err := fx.q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := jobdata.Decode(job.Data, testKeys, job.ID)
			rec.State, rec.ErrorKind, rec.LastError, rec.StateInfo = jobdata.Failed, tt.kind, tt.reason, jobdata.ErrorInfo(tt.reason)
			if err := fx.q.Finish(ctx, job, rec.Encode(testKeys, job.ID)); err != nil {
				t.Fatal(err)
			}
			select {
			case a := <-got:
				if a[0] != strconv.Itoa(tt.code) || a[1] != tt.answer {
					t.Fatalf("answer %s %s, want %d %s", a[0], a[1], tt.code, tt.answer)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("one-shot did not answer")
			}
		})
	}
}

// TestReplicateCancelFinishedJob: a cancel finds a _replicate job that
// completed (it stays visible until transient_job_max_age_sec), but not
// one that failed: CouchDB 3.x removed that one when it crashed.
func TestReplicateCancelFinishedJob(t *testing.T) {
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	for _, tt := range []struct {
		state string
		code  int
	}{{jobdata.Completed, 200}, {jobdata.Failed, 404}} {
		t.Run(tt.state, func(t *testing.T) {
			fx := newFixture(t)
			_, resp := post(fx, `{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t","continuous":true}`, admin)
			var r struct {
				LocalID string `json:"_local_id"`
			}
			json.Unmarshal([]byte(resp), &r)
			// Finish the job as the job server does.
			ctx, cancel := context.WithTimeout(fx.ctx, 5*time.Second)
			defer cancel()
			job, err := fx.q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := jobdata.Decode(job.Data, testKeys, job.ID)
			rec.State = tt.state
			if err := fx.q.Finish(ctx, job, rec.Encode(testKeys, job.ID)); err != nil {
				t.Fatal(err)
			}
			if code, resp := post(fx, `{"replication_id":"`+r.LocalID+`","cancel":true}`, admin); code != tt.code {
				t.Fatalf("cancel of a %s job: %d %s, want %d", tt.state, code, resp, tt.code)
			}
		})
	}
}

// TestReplicateOtherUsersJob: a user who is not a server admin can
// neither cancel (by id or by the same body) nor start another user's
// replication: CouchDB's check_authorization answers 401 "You are not a
// server admin.", as it does for any other refusal of that kind.
func TestReplicateOtherUsersJob(t *testing.T) {
	alice := hooks.UserCtx{Name: "alice", Roles: []string{}}
	bob := hooks.UserCtx{Name: "bob", Roles: []string{}}
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	body := `{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t","continuous":true}`
	cancelBody := strings.Replace(body, `"continuous":true`, `"continuous":true,"cancel":true`, 1)
	const refused = `{"error":"unauthorized","reason":"You are not a server admin."}`
	fx := newFixture(t)
	code, resp := post(fx, body, alice)
	var r struct {
		LocalID string `json:"_local_id"`
	}
	json.Unmarshal([]byte(resp), &r)
	if code != 202 {
		t.Fatalf("alice starts: %d %s", code, resp)
	}
	steps := []struct {
		name   string
		body   string
		user   hooks.UserCtx
		code   int
		answer string
	}{
		{"bob starts the same", body, bob, 401, refused},
		{"bob cancels by body", cancelBody, bob, 401, refused},
		{"bob cancels by id", `{"replication_id":"` + r.LocalID + `","cancel":true}`, bob, 401, refused},
		{"an admin cancels by body", cancelBody, admin, 200, `{"ok":true,"_local_id":"` + r.LocalID + `"}`},
	}
	for _, st := range steps {
		if code, resp := post(fx, st.body, st.user); code != st.code || resp != st.answer {
			t.Errorf("%s: %d %s, want %d %s", st.name, code, resp, st.code, st.answer)
		}
	}
	if n := len(fx.jobs()); n != 0 {
		t.Fatalf("%d jobs left", n)
	}
}

// testKeys seals the job records of these tests.
var testKeys = seal.NewKeyring(seal.RandomKey())
