package frontend

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/server/v3/embed"
)

// docIDs is a `doc_ids` member of n ids of 10 characters: it adds about
// 13 bytes per id to a job record.
func docIDs(n int) string {
	var b strings.Builder
	b.WriteString(`,"doc_ids":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"id%08d"`, i)
	}
	return b.String() + "]"
}

// Doc sizes: a job record of tooBigIDs ids is larger than the queue takes
// at all (jobs.MaxDataSize), one of fitIDs ids fits jobstore.MaxNewSize.
const (
	tooBigIDs = 100_000
	fitIDs    = 65_000
)

// TestJobSizeAtWriteTime: a doc whose job would be too large for the queue
// is refused at write time with a reason naming the limit, as is such a
// _replicate body; one just under the limit is accepted and becomes its
// job; deleting a large doc, or writing one that makes no job, is never
// refused.
func TestJobSizeAtWriteTime(t *testing.T) {
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	bob := hooks.UserCtx{Name: "bob"}
	limit := fmt.Sprintf("over the limit of %d bytes", jobstore.MaxNewSize)
	tests := []struct {
		name   string
		db     string
		doc    string
		user   hooks.UserCtx
		reason string // "" = accepted
	}{
		{"too large", "_replicator", doc("big", "t", docIDs(tooBigIDs)), admin, limit},
		{"too large for new jobs only", "b/_replicator", doc("big", "t", docIDs(75_000)), bob, limit},
		{"fits", "_replicator", doc("big", "t", docIDs(fitIDs)), admin, ""},
		{"deleted", "_replicator", `{"_id":"big","_deleted":true` + docIDs(tooBigIDs) + `}`, admin, ""},
		{"completed", "_replicator", doc("big", "t", docIDs(tooBigIDs)+`,"_replication_state":"completed"`), admin, ""},
		{"the replicator's own write", "_replicator", doc("big", "t", docIDs(tooBigIDs)), hooks.SystemUser(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BeforeDocUpdate(tt.db, []byte(tt.doc), tt.user, parse.DefaultOptions(), nil)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			he, ok := err.(*hooks.Error)
			if !ok || he.Status != 403 || he.Err != "forbidden" || !strings.HasPrefix(he.Reason, "Replication too large for the job queue: its job would be ") || !strings.Contains(he.Reason, tt.reason) {
				t.Fatalf("got %v, want 403 forbidden saying %q", err, tt.reason)
			}
		})
	}

	// What write time accepts becomes a job.
	fx := newFixture(t)
	fx.write("_replicator", "big", doc("big", "t", docIDs(fitIDs)))
	if rec := fx.jobs()[parse.PersistentJobID("uuid1", "big")]; rec == nil || rec.State != jobdata.Pending || len(rec.Rep.DocIDs) != fitIDs {
		t.Fatalf("the largest accepted doc did not become its job: %+v", rec)
	}

	// _replicate answers 400 with the same reason, and 413 for a body
	// larger than it reads.
	body := fmt.Sprintf(`{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t"%s}`, docIDs(tooBigIDs))
	if code, resp := post(fx, body, admin); code != 400 || !strings.Contains(resp, `"error":"bad_request"`) || !strings.Contains(resp, limit) {
		t.Errorf("_replicate too large: %d %s", code, resp)
	}
	body = fmt.Sprintf(`{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/t"%s}`, docIDs(400_000))
	if code, resp := post(fx, body, admin); code != http.StatusRequestEntityTooLarge || resp != `{"error":"too_large","reason":"the request entity is too large"}` {
		t.Errorf("_replicate body over %d bytes: %d %s", maxBody, code, resp)
	}
	if n := len(fx.jobs()); n != 1 {
		t.Errorf("%d jobs, want only the accepted doc's", n)
	}
}

// TestOversizedDocFailsAlone: a doc that got past write time although its
// job is too large (a restore, an older version) becomes a failed job
// with the reason, in the same delivery as the docs around it, which
// become their jobs; the db's position moves past all of them, and other
// replicator dbs are not held back.
func TestOversizedDocFailsAlone(t *testing.T) {
	fx := newFixture(t)
	fx.svc.createDB("b/_replicator", "uuid2")
	evs := []hooks.DocWrite{
		fx.svc.put("b/_replicator", "before", []byte(doc("before", "t1", ""))),
		fx.svc.put("b/_replicator", "big", []byte(doc("big", "t2", docIDs(tooBigIDs)))),
		fx.svc.put("b/_replicator", "after", []byte(doc("after", "t3", ""))),
	}
	if err := fx.f.AfterDocWrites(fx.ctx, "b/_replicator", evs); err != nil {
		t.Fatalf("one oversized doc failed the delivery: %v", err)
	}
	fx.write("_replicator", "other", doc("other", "t4", ""))
	js := fx.jobs()
	for _, id := range []string{"before", "after"} {
		if rec := js[parse.PersistentJobID("uuid2", id)]; rec == nil || rec.State != jobdata.Pending {
			t.Errorf("%s: %+v, want a pending job", id, rec)
		}
	}
	if rec := js[parse.PersistentJobID("uuid1", "other")]; rec == nil || rec.State != jobdata.Pending {
		t.Errorf("a doc of another replicator db: %+v, want a pending job", rec)
	}
	big := js[parse.PersistentJobID("uuid2", "big")]
	if big == nil || big.State != jobdata.Failed || !strings.HasPrefix(big.ErrorReason(), "Replication too large for the job queue") {
		t.Fatalf("oversized doc: %+v, want a failed job saying why", big)
	}
	if pos := fx.position("b/_replicator"); pos.Seq != "3" {
		t.Errorf("b/_replicator processed up to %q, want 3", pos.Seq)
	}
	// A catch-up from the start reads the doc again, with the same outcome.
	fx.setPosition("b/_replicator", jobstore.DBSeq{})
	if err := fx.f.CatchUp(fx.ctx, "b/_replicator"); err != nil {
		t.Fatalf("catch-up over the oversized doc: %v", err)
	}
	if pos := fx.position("b/_replicator"); pos.Seq != "3" {
		t.Errorf("after catch-up, b/_replicator processed up to %q, want 3", pos.Seq)
	}
}

// position returns the processed position of db.
func (fx *fixture) position(db string) jobstore.DBSeq {
	var pos jobstore.DBSeq
	fx.q.Transact(fx.ctx, func(tx *jobs.Tx) error {
		var err error
		pos, err = jobstore.GetDBSeq(tx.KV(), db)
		return err
	})
	return pos
}

// setPosition records pos as db's processed position ("" seq: none).
func (fx *fixture) setPosition(db string, pos jobstore.DBSeq) {
	fx.q.Transact(fx.ctx, func(tx *jobs.Tx) error {
		if pos.Seq == "" {
			jobstore.ClearDBSeq(tx.KV(), db)
		} else {
			jobstore.SetDBSeq(tx.KV(), db, pos)
		}
		return nil
	})
}

// etcdFixture is a fixture whose queue is on a one-member embedded etcd
// configured by configure.
func etcdFixture(t *testing.T, configure func(*embed.Config)) *fixture {
	t.Helper()
	c := etcdtest.StartClusterWith(t, 1, configure)
	store, err := etcd.Open(context.Background(), etcd.Config{Endpoints: c.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	fx := newFixtureOn(t, store)
	t.Cleanup(func() { store.Close() })
	return fx
}

// TestLargeDocsOnEtcd: on etcd, whose requests are bounded (1.5 MiB by
// default), a delivery of several large docs, each of which fits the
// queue, is split into transactions that fit; and with a bound below one
// doc's job, that doc fails alone with the store's reason while the
// others become their jobs.
func TestLargeDocsOnEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	t.Run("several large docs in one delivery", func(t *testing.T) {
		fx := etcdFixture(t, nil)
		var evs []hooks.DocWrite
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("large%d", i)
			evs = append(evs, fx.svc.put("_replicator", id, []byte(doc(id, id, docIDs(50_000)))))
		}
		if err := fx.f.AfterDocWrites(fx.ctx, "_replicator", evs); err != nil {
			t.Fatalf("three large docs: %v", err)
		}
		js := fx.jobs()
		for i := 0; i < 3; i++ {
			if rec := js[parse.PersistentJobID("uuid1", fmt.Sprintf("large%d", i))]; rec == nil || rec.State != jobdata.Pending {
				t.Errorf("large%d: %+v, want a pending job", i, rec)
			}
		}
		if pos := fx.position("_replicator"); pos.Seq != "3" {
			t.Errorf("processed up to %q, want 3", pos.Seq)
		}
	})
	t.Run("a thousand docs in one delivery", func(t *testing.T) {
		fx := etcdFixture(t, nil)
		var logged bytes.Buffer
		fx.f.log = hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Warn})
		var evs []hooks.DocWrite
		for i := 0; i < 1000; i++ {
			id := fmt.Sprintf("d%04d", i)
			evs = append(evs, fx.svc.put("_replicator", id, []byte(doc(id, id, docIDs(80)))))
		}
		if err := fx.f.AfterDocWrites(fx.ctx, "_replicator", evs); err != nil {
			t.Fatalf("a thousand docs: %v", err)
		}
		if n := len(fx.jobs()); n != 1000 {
			t.Errorf("%d jobs, want 1000", n)
		}
		// They went in transactions that etcd takes, not one by one after
		// one it refused.
		if logged.Len() > 0 {
			t.Errorf("warnings: %s", logged.String())
		}
	})
	t.Run("a doc over the store's bound", func(t *testing.T) {
		fx := etcdFixture(t, func(cfg *embed.Config) { cfg.MaxRequestBytes = 400 << 10 })
		evs := []hooks.DocWrite{
			fx.svc.put("_replicator", "before", []byte(doc("before", "t1", ""))),
			fx.svc.put("_replicator", "big", []byte(doc("big", "t2", docIDs(40_000)))),
			fx.svc.put("_replicator", "after", []byte(doc("after", "t3", ""))),
		}
		if err := fx.f.AfterDocWrites(fx.ctx, "_replicator", evs); err != nil {
			t.Fatalf("one doc over the store's bound failed the delivery: %v", err)
		}
		js := fx.jobs()
		for _, id := range []string{"before", "after"} {
			if rec := js[parse.PersistentJobID("uuid1", id)]; rec == nil || rec.State != jobdata.Pending {
				t.Errorf("%s: %+v, want a pending job", id, rec)
			}
		}
		big := js[parse.PersistentJobID("uuid1", "big")]
		if big == nil || big.State != jobdata.Failed || !strings.Contains(big.ErrorReason(), "could not be stored") || !strings.Contains(big.ErrorReason(), "too large") {
			t.Fatalf("doc over the store's bound: %+v, want a failed job saying why", big)
		}
		if pos := fx.position("_replicator"); pos.Seq != "3" {
			t.Errorf("processed up to %q, want 3", pos.Seq)
		}
	})
}

// fixedNow is the time of the records FuzzRecordBound builds.
var fixedNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// FuzzRecordBound checks recordBound, which lets write time skip sizing
// the job of small docs: no doc's job record is larger.
func FuzzRecordBound(f *testing.F) {
	lt := strings.Repeat("<", 300)
	for _, s := range []string{
		doc("a", "t", ""),
		`{"_id":"` + lt + `","source":"http://h/a","target":"http://h/b","proxy":"http://p/` + lt + `"}`,
		`{"_id":"x","source":{"url":"http://h/a","headers":{"X":"` + lt + `"}},"target":"http://h/b","user_ctx":{"name":"` + lt + `","roles":["` + lt + `"]}}`,
		`{"_id":"x","source":"http://u:` + lt + `@h/a","target":"http://h/` + lt + `","doc_ids":["` + lt + `","%3C%3C"]}`,
		`{"_id":"x","source":"http://h/a","target":"http://h/b","selector":{"` + lt + `":{"$regex":"` + lt + `"}},"since_seq":"` + lt + `"}`,
		`{"_id":"x","source":"http://h/a","target":"http://h/b","filter":"d/f","query_params":{"` + lt + `":"` + lt + `"},"create_target_params":{"q":"` + lt + `"},"socket_options":"[{sndbuf, 1}, {nodelay, true}]"}`,
	} {
		f.Add([]byte(s))
	}
	opts := parse.DefaultOptions()
	const db = "a/&lt;_replicator"
	f.Fuzz(func(t *testing.T, body []byte) {
		c := docChange{db: db, uuid: sizingUUID, docID: docID(body), body: body}
		rec, _, _ := docRecord(c, opts, fixedNow)
		if rec == nil || rec.State == jobdata.Failed {
			return
		}
		if n, bound := len(rec.Encode(jobstore.SizingKeys(), "j")), recordBound(db, body, opts); n > bound {
			t.Fatalf("record of %d bytes, over its bound %d, for %s", n, bound, body)
		}
	})
}
