package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestE2ECouchDBInterop replicates both ways between minicouch and a real
// CouchDB 3.x (COUCHEPI_COUCHDB_URL, admin credentials): CouchDB's own
// replicator from minicouch into CouchDB and into minicouch, then
// couchepi's replicator from that CouchDB copy back into minicouch. Every
// copy must hold the source's leaf revisions (conflicts and deleted
// leaves), bodies and attachment contents. CouchDB reaches minicouch
// through a recording proxy; COUCHEPI_RECORD_REQUESTS=path writes the
// request shapes its replicator sent (couchapi's
// TestCouchDBReplicatorRequests replays them without a CouchDB). CouchDB
// runs each _replicate as a job of its scheduler: while other replications
// hold all its max_jobs slots the job waits (the test logs so every 30
// seconds), and one the test gives up on is cancelled.
//
//	COUCHEPI_COUCHDB_URL=http://admin:pass@127.0.0.1:25984/ go test ./plugin/e2e -run TestE2ECouchDBInterop -v -timeout 60m
func TestE2ECouchDBInterop(t *testing.T) {
	raw := os.Getenv("COUCHEPI_COUCHDB_URL")
	if raw == "" {
		t.Skip("set COUCHEPI_COUCHDB_URL=http://admin:pass@127.0.0.1:25984/ to a CouchDB 3.x to run")
	}
	n := 20000
	if v := os.Getenv("COUCHEPI_INTEROP_DOCS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("COUCHEPI_INTEROP_DOCS=%q: want a number of docs >= 100", v)
		}
	}
	cdb := newHTTPCouch(t, "couchdb", raw)
	c := startCouch(t, "")
	mc := newHTTPCouch(t, "minicouch", c.url())

	// CouchDB is shared: this run's dbs carry a prefix of their own and are
	// deleted at the end.
	prefix := fmt.Sprintf("interop%d_", time.Now().UnixNano())
	copyA := prefix + "a"
	t.Cleanup(func() { cdb.do("DELETE", "/"+copyA, nil) })

	const src, copyB, copyC = "interop_src", "interop_b", "interop_c"
	start := time.Now()
	locals := buildInteropSource(t, mc, src, n)
	t.Logf("source: %d docs built in %v", n, time.Since(start).Round(time.Millisecond))

	rec := newShapeRecorder(t, mc.base, map[string]string{src: "source", copyB: "target"})
	proxy := httptest.NewServer(rec)
	defer proxy.Close()
	viaProxy := newHTTPCouch(t, "proxy", strings.Replace(c.url(), c.addr, strings.TrimPrefix(proxy.URL, "http://"), 1))

	srcLeaves := 0
	srcSnap := snapshotDB(t, mc, src)
	for _, leaves := range srcSnap {
		srcLeaves += len(leaves)
	}
	// A _replicate that fails or outlives the test is cancelled on CouchDB,
	// which is shared.
	t.Cleanup(func() {
		if t.Failed() {
			cancelReplications(t, cdb, strings.TrimPrefix(proxy.URL, "http://"), prefix)
		}
	})
	replicate("(a) CouchDB's replicator, minicouch → CouchDB", t, cdb, viaProxy.endpoint(src), cdb.endpoint(copyA), copyA, srcLeaves)
	replicate("(b) CouchDB's replicator, minicouch → minicouch", t, cdb, viaProxy.endpoint(src), viaProxy.endpoint(copyB), strings.TrimPrefix(proxy.URL, "http://")+"/"+copyB, srcLeaves)
	replicate("(c) couchepi's replicator, CouchDB → minicouch", t, mc, cdb.endpoint(copyA), mc.endpoint(copyC), copyC, srcLeaves)
	rec.finish()

	copies := []struct {
		name string
		h    *httpCouch
		db   string
	}{{"(a) CouchDB copy", cdb, copyA}, {"(b) minicouch copy by CouchDB", mc, copyB}, {"(c) minicouch copy by couchepi", mc, copyC}}
	for _, cp := range copies {
		snap := snapshotDB(t, cp.h, cp.db)
		diffs, s := compareSnapshots(srcSnap, snap)
		t.Logf("%s: %d docs, %d leaves, %d attachments compared; %d attachment digests differ from the source's (%d of them of attachments the copy keeps gzip-encoded: its digest is the encoded bytes')",
			cp.name, s.docs, s.leaves, s.atts, s.digestDiffs, s.digestDiffsEncoded)
		for _, id := range locals {
			if code, _, body := cp.h.do("GET", "/"+url.PathEscape(cp.db)+"/"+id, nil); code != 404 {
				diffs = append(diffs, fmt.Sprintf("%s was replicated: %d %.100s", id, code, body))
			}
		}
		if len(diffs) > 0 {
			t.Errorf("%s differs from the source in %d ways, first:\n  %s", cp.name, len(diffs), strings.Join(diffs[:min(len(diffs), 10)], "\n  "))
		}
	}
}

// replicate runs a one-shot replication with server's POST /_replicate,
// logs how long it took and checks its answer: every one of the source's
// leaf revisions written, no write failure. It watches server's
// _active_tasks for the replication's task (one whose source or target
// contains match) and logs, every 30 seconds and with the time, whether it
// showed: a CouchDB whose scheduler is full starts the job only when other
// jobs make room, and that wait is part of the time.
func replicate(what string, t *testing.T, server *httpCouch, source, target, match string, wantWritten int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"source": source, "target": target, "create_target": true})
	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		// Leave time to cancel the replication and delete the dbs.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-time.Minute))
		defer cancel()
	}
	done := make(chan struct{})
	var seen time.Duration // when its task first showed, 0 not yet
	watched := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(watched)
		poll := time.NewTicker(2 * time.Second)
		defer poll.Stop()
		lastLog := time.Now()
		for {
			select {
			case <-done:
				return
			case <-poll.C:
			}
			var tasks []map[string]any
			_, _, b := server.do("GET", "/_active_tasks", nil)
			json.Unmarshal(b, &tasks)
			state := "not in _active_tasks yet"
			for _, task := range tasks {
				if s, _ := task["source"].(string); strings.Contains(s+" "+fmt.Sprint(task["target"]), match) {
					if seen == 0 {
						seen = time.Since(start)
					}
					state = fmt.Sprintf("running, docs_written %v, changes_pending %v", task["docs_written"], task["changes_pending"])
				}
			}
			if time.Since(lastLog) >= 30*time.Second {
				lastLog = time.Now()
				t.Logf("%s: still replicating after %v: %s (%d tasks on %s)", what, time.Since(start).Round(time.Second), state, len(tasks), server.name)
			}
		}
	}()
	code, _, resp := server.doContext(ctx, "POST", "/_replicate", body)
	took := time.Since(start)
	close(done)
	<-watched
	queued := "its task never seen in _active_tasks, polled every 2s"
	if seen > 0 {
		queued = fmt.Sprintf("its task showed in _active_tasks after %v, ran at most %v", seen.Round(time.Second), (took - seen + 2*time.Second).Round(time.Second))
	}
	if code != 200 {
		t.Fatalf("%s: _replicate after %v (%s): %d %.500s", what, took.Round(time.Millisecond), queued, code, resp)
	}
	var r struct {
		OK      bool `json:"ok"`
		History []struct {
			DocsRead         int `json:"docs_read"`
			DocsWritten      int `json:"docs_written"`
			DocWriteFailures int `json:"doc_write_failures"`
		} `json:"history"`
	}
	if err := json.Unmarshal(resp, &r); err != nil || !r.OK || len(r.History) == 0 {
		t.Fatalf("%s: _replicate answered %.300s", what, resp)
	}
	h := r.History[0]
	t.Logf("%s: %v (%s), docs_read %d, docs_written %d, doc_write_failures %d", what, took.Round(time.Millisecond), queued, h.DocsRead, h.DocsWritten, h.DocWriteFailures)
	if h.DocWriteFailures != 0 || h.DocsWritten != wantWritten {
		t.Errorf("%s: docs_written %d (want %d, the source's leaf revisions), doc_write_failures %d", what, h.DocsWritten, wantWritten, h.DocWriteFailures)
	}
}

// cancelReplications cancels the transient replications on CouchDB whose
// source or target contains one of the strings.
func cancelReplications(t *testing.T, cdb *httpCouch, match ...string) {
	var jobs struct {
		Jobs []struct {
			ID       string  `json:"id"`
			Database *string `json:"database"`
			Source   string  `json:"source"`
			Target   string  `json:"target"`
		} `json:"jobs"`
	}
	_, _, b := cdb.do("GET", "/_scheduler/jobs?limit=1000000", nil) // all: the default is 100
	json.Unmarshal(b, &jobs)
	n := 0
	for _, j := range jobs.Jobs {
		for _, m := range match {
			if j.Database == nil && strings.Contains(j.Source+" "+j.Target, m) {
				body, _ := json.Marshal(map[string]any{"replication_id": j.ID, "cancel": true})
				code, _, resp := cdb.do("POST", "/_replicate", body)
				t.Logf("cancelled CouchDB's replication %s (%s → %s): %d %s", j.ID, j.Source, j.Target, code, resp)
				n++
				break
			}
		}
	}
	if n == 0 {
		t.Logf("no replication of this run left among CouchDB's %d jobs", len(jobs.Jobs))
	}
}

// httpCouch talks to a CouchDB-compatible server as its admin. Its
// requests may take up to 10 minutes, and doContext's as long as the
// context allows (minicouchtest's helpers give up after a minute, before a
// one-shot replication of many docs ends).
type httpCouch struct {
	t          *testing.T
	name       string
	base       string // without credentials, ends in "/"
	user, pass string
	client     *http.Client
}

func newHTTPCouch(t *testing.T, name, raw string) *httpCouch {
	u, err := url.Parse(strings.TrimSuffix(raw, "/") + "/")
	if err != nil || u.User == nil {
		t.Fatalf("%s: %q is not a URL with admin credentials", name, raw)
	}
	h := &httpCouch{t: t, name: name, user: u.User.Username(), client: &http.Client{}}
	h.pass, _ = u.User.Password()
	u.User = nil
	h.base = u.String()
	return h
}

// endpoint is db's URL with credentials, as a replication names it.
func (h *httpCouch) endpoint(db string) string {
	u, _ := url.Parse(h.base + url.PathEscape(db))
	u.User = url.UserPassword(h.user, h.pass)
	return u.String()
}

// do sends a request; hdr are header name, value pairs (default
// Content-Type and Accept: application/json).
func (h *httpCouch) do(method, path string, body []byte, hdr ...string) (int, http.Header, []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return h.doContext(ctx, method, path, body, hdr...)
}

func (h *httpCouch) doContext(ctx context.Context, method, path string, body []byte, hdr ...string) (int, http.Header, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(h.base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	req.SetBasicAuth(h.user, h.pass)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	return resp.StatusCode, resp.Header, b
}

func (h *httpCouch) must(method, path string, body []byte, want int) []byte {
	h.t.Helper()
	code, _, b := h.do(method, path, body)
	if code != want {
		h.t.Fatalf("%s: %s %s: %d %.500s (want %d)", h.name, method, path, code, b, want)
	}
	return b
}

// docPath is the path of a doc id in a db, its "_design/" or "_local/"
// prefix left unescaped.
func docPath(db, id string) string {
	for _, p := range []string{"_design/", "_local/"} {
		if rest, ok := strings.CutPrefix(id, p); ok {
			return "/" + url.PathEscape(db) + "/" + p + url.PathEscape(rest)
		}
	}
	return "/" + url.PathEscape(db) + "/" + url.PathEscape(id)
}

// buildInteropSource fills db with n docs through _bulk_docs: about 10%
// with conflicting branches (written with new_edits false, some of them
// deleted leaves), 4% deleted, 2% with a 4 KB attachment and 1% with a
// 100 KB one (text/plain, which CouchDB compresses, or
// application/octet-stream, random bytes), a design doc and a few _local
// docs. It returns the _local docs' ids.
func buildInteropSource(t *testing.T, h *httpCouch, db string, n int) []string {
	h.must("PUT", "/"+db, nil, 201)
	r := rand.New(rand.NewPCG(15, 2026))
	type plan struct{ conflict, deleted, small, large, text bool }
	plans := make([]plan, n)
	for i := range plans {
		plans[i] = plan{conflict: r.IntN(100) < 10, deleted: r.IntN(100) < 4, small: r.IntN(100) < 2, large: r.IntN(100) < 1, text: r.IntN(2) == 0}
	}
	id := func(i int) string { return fmt.Sprintf("d%06d", i) }
	bulk := func(docs []map[string]any, newEdits bool) []struct{ ID, Rev, Error string } {
		body, _ := json.Marshal(map[string]any{"docs": docs, "new_edits": newEdits})
		var res []struct{ ID, Rev, Error string }
		json.Unmarshal(h.must("POST", "/"+db+"/_bulk_docs", body, 201), &res)
		for _, x := range res {
			if x.Error != "" {
				t.Fatalf("_bulk_docs: %s: %s", x.ID, x.Error)
			}
		}
		return res
	}
	att := func(i, size int, text bool) map[string]any {
		if text {
			var b strings.Builder
			for l := 0; b.Len() < size; l++ {
				fmt.Fprintf(&b, "doc %d, line %d: compressible text that CouchDB gzips when it stores it\n", i, l)
			}
			return map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte(b.String()[:size]))}
		}
		data := make([]byte, size)
		rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(size >> 10)}).Read(data)
		return map[string]any{"content_type": "application/octet-stream", "data": base64.StdEncoding.EncodeToString(data)}
	}

	const batch = 500
	revs := make([]string, n)
	for from := 0; from < n; from += batch {
		var docs []map[string]any
		for i := from; i < min(from+batch, n); i++ {
			p := plans[i]
			d := map[string]any{"_id": id(i), "n": i, "name": fmt.Sprintf("doc number %d", i), "tags": []string{"interop", strconv.Itoa(i % 7)}, "nested": map[string]any{"x": i * 3, "y": 0.5, "ok": i%2 == 0}}
			atts := map[string]any{}
			if p.small {
				atts["small."+map[bool]string{true: "txt", false: "bin"}[p.text]] = att(i, 4096, p.text)
			}
			if p.large {
				atts["large."+map[bool]string{true: "txt", false: "bin"}[!p.text]] = att(i, 100*1024, !p.text)
			}
			if len(atts) > 0 {
				d["_attachments"] = atts
			}
			docs = append(docs, d)
		}
		for k, res := range bulk(docs, true) {
			revs[from+k] = res.Rev
		}
	}

	// Tombstones (half of them with a body), then conflicting branches:
	// a second root at generation 1, and for every other conflicted doc a
	// deleted branch at generation 2; a doc deleted above whose branch is
	// written here lives again through the branch.
	var dels, branches []map[string]any
	hash := func(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }
	for i, p := range plans {
		if p.deleted {
			d := map[string]any{"_id": id(i), "_rev": revs[i], "_deleted": true}
			if i%2 == 0 {
				d["reason"] = "tombstone with a body"
			}
			dels = append(dels, d)
		}
		if p.conflict {
			b := map[string]any{"_id": id(i), "_rev": "1-" + hash(id(i)+"a"), "n": i, "branch": "a"}
			if p.small || p.large {
				b["_attachments"] = map[string]any{"branch.txt": map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("branch of " + id(i)))}}
			}
			branches = append(branches, b)
			if i%2 == 1 {
				h1, h2 := hash(id(i)+"b1"), hash(id(i)+"b2")
				branches = append(branches, map[string]any{"_id": id(i), "_rev": "2-" + h2, "_deleted": true,
					"_revisions": map[string]any{"start": 2, "ids": []string{h2, h1}}})
			}
		}
	}
	for k := 0; k < len(dels); k += batch {
		bulk(dels[k:min(k+batch, len(dels))], true)
	}
	for k := 0; k < len(branches); k += batch {
		bulk(branches[k:min(k+batch, len(branches))], false)
	}

	h.must("PUT", "/"+db+"/_design/app", []byte(`{"language":"javascript",`+
		`"views":{"by_n":{"map":"function(doc){ if (doc.n !== undefined) emit(doc.n, null); }","reduce":"_count"}},`+
		`"filters":{"even":"function(doc, req){ return doc.n % 2 == 0; }"},`+
		`"_attachments":{"readme.txt":{"content_type":"text/plain","data":"`+base64.StdEncoding.EncodeToString([]byte("the app's readme"))+`"}}}`), 201)
	var locals []string
	for k := range 3 {
		id := fmt.Sprintf("_local/interop%d", k)
		h.must("PUT", docPath(db, id), []byte(`{"not":"replicated"}`), 201)
		locals = append(locals, id)
	}
	return locals
}

// A leaf is one leaf revision of a doc as compared: its body without the
// metadata that legitimately differs between copies, and its attachments.
type leaf struct {
	body string // canonical JSON without _rev, _revisions, _attachments
	atts map[string]attSum
}

type attSum struct {
	contentType string
	length      int64
	md5         string // of the decoded content
	digest      string // as the server reports it
	encoding    string // how the server keeps it ("gzip" or none)
}

// snapshot maps doc id → leaf rev → leaf.
type snapshot map[string]map[string]leaf

// snapshotDB reads every doc of db, deleted ones included: ids and leaf
// revs from _changes?style=all_docs, leaves with their attachments from
// open_revs=all. A feed that lists other leaves than the doc fails t.
func snapshotDB(t *testing.T, h *httpCouch, db string) snapshot {
	var feed struct {
		Results []struct {
			ID      string `json:"id"`
			Changes []struct {
				Rev string `json:"rev"`
			} `json:"changes"`
		} `json:"results"`
	}
	if err := json.Unmarshal(h.must("GET", "/"+url.PathEscape(db)+"/_changes?style=all_docs", nil, 200), &feed); err != nil {
		t.Fatalf("%s/%s _changes: %v", h.name, db, err)
	}
	snap := snapshot{}
	var mu sync.Mutex
	var errs []string
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				res := feed.Results[k]
				leaves, err := readLeaves(h, db, res.ID)
				var feedRevs []string
				for _, ch := range res.Changes {
					feedRevs = append(feedRevs, ch.Rev)
				}
				slices.Sort(feedRevs)
				if err == nil && !slices.Equal(feedRevs, sortedKeys(leaves)) {
					err = fmt.Errorf("_changes lists leaves %v, open_revs=all %v", feedRevs, sortedKeys(leaves))
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, res.ID+": "+err.Error())
				}
				snap[res.ID] = leaves
				mu.Unlock()
			}
		}()
	}
	for k := range feed.Results {
		jobs <- k
	}
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		sort.Strings(errs)
		t.Fatalf("%s/%s: %d docs unreadable, first: %s", h.name, db, len(errs), strings.Join(errs[:min(len(errs), 5)], "; "))
	}
	return snap
}

// readLeaves reads every leaf of doc id: bodies and attachment stubs
// (length, digest) first, then, when there are attachments, their contents
// (an inline attachment has no length).
func readLeaves(h *httpCouch, db, id string) (map[string]leaf, error) {
	stubs, err := openRevsAll(h, db, id, "&att_encoding_info=true")
	if err != nil {
		return nil, err
	}
	var full map[string]map[string]json.RawMessage
	leaves := map[string]leaf{}
	for rev, doc := range stubs {
		var atts map[string]struct {
			ContentType string `json:"content_type"`
			Length      int64  `json:"length"`
			Digest      string `json:"digest"`
			Encoding    string `json:"encoding"`
			Stub        bool   `json:"stub"`
		}
		if a, ok := doc["_attachments"]; ok {
			if err := json.Unmarshal(a, &atts); err != nil {
				return nil, fmt.Errorf("%s: _attachments: %v", rev, err)
			}
		}
		if len(atts) > 0 && full == nil {
			if full, err = openRevsAll(h, db, id, "&attachments=true"); err != nil {
				return nil, err
			}
		}
		l := leaf{atts: map[string]attSum{}}
		for name, a := range atts {
			data, err := attData(full[rev], name)
			if err != nil {
				return nil, fmt.Errorf("%s: attachment %s: %v", rev, name, err)
			}
			if !a.Stub || int64(len(data)) != a.Length {
				return nil, fmt.Errorf("%s: attachment %s has %d bytes, its stub %+v", rev, name, len(data), a)
			}
			sum := md5.Sum(data)
			l.atts[name] = attSum{contentType: a.ContentType, length: a.Length, md5: hex.EncodeToString(sum[:]), digest: a.Digest, encoding: a.Encoding}
		}
		for _, k := range []string{"_rev", "_revisions", "_attachments"} {
			delete(doc, k)
		}
		var canon map[string]any
		raw, _ := json.Marshal(doc)
		json.Unmarshal(raw, &canon)
		b, _ := json.Marshal(canon)
		l.body = string(b)
		leaves[rev] = l
	}
	return leaves, nil
}

// openRevsAll reads every leaf of doc id as JSON, by rev.
func openRevsAll(h *httpCouch, db, id, query string) (map[string]map[string]json.RawMessage, error) {
	path := docPath(db, id) + "?open_revs=all" + query
	code, _, body := h.do("GET", path, nil)
	if code != 200 {
		return nil, fmt.Errorf("%s: %d %.200s", path, code, body)
	}
	var res []struct {
		OK map[string]json.RawMessage `json:"ok"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	docs := map[string]map[string]json.RawMessage{}
	for _, r := range res {
		var rev string
		if json.Unmarshal(r.OK["_rev"], &rev) != nil {
			return nil, fmt.Errorf("%s answered %.200s", path, body)
		}
		docs[rev] = r.OK
	}
	return docs, nil
}

// attData decodes an inline attachment of doc (gunzipped when the server
// says it keeps it gzip-encoded).
func attData(doc map[string]json.RawMessage, name string) ([]byte, error) {
	var atts map[string]struct {
		Data     []byte `json:"data"`
		Encoding string `json:"encoding"`
	}
	if err := json.Unmarshal(doc["_attachments"], &atts); err != nil {
		return nil, err
	}
	a, ok := atts[name]
	if !ok {
		return nil, fmt.Errorf("not in the doc read with attachments=true")
	}
	switch a.Encoding {
	case "":
		return a.Data, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(a.Data))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	}
	return nil, fmt.Errorf("encoding %q", a.Encoding)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

type compared struct {
	docs, leaves, atts int
	digestDiffs        int // attachments whose digest differs from the source's
	digestDiffsEncoded int // of those, the ones the copy keeps encoded and the source does not
}

// compareSnapshots lists how dst differs from src (sorted), and counts what
// it compared. Attachment digests are counted, not listed: CouchDB stores
// compressible attachments gzipped and its digest is then the compressed
// bytes' one.
func compareSnapshots(src, dst snapshot) ([]string, compared) {
	var diffs []string
	var s compared
	for _, id := range sortedKeys(src) {
		s.docs++
		sl, dl := src[id], dst[id]
		if dl == nil {
			diffs = append(diffs, id+": missing")
			continue
		}
		if a, b := sortedKeys(sl), sortedKeys(dl); !slices.Equal(a, b) {
			diffs = append(diffs, fmt.Sprintf("%s: leaves %v, want %v", id, b, a))
			continue
		}
		for _, rev := range sortedKeys(sl) {
			s.leaves++
			a, b := sl[rev], dl[rev]
			if a.body != b.body {
				diffs = append(diffs, fmt.Sprintf("%s %s: body %.200s, want %.200s", id, rev, b.body, a.body))
			}
			if x, y := sortedKeys(a.atts), sortedKeys(b.atts); !slices.Equal(x, y) {
				diffs = append(diffs, fmt.Sprintf("%s %s: attachments %v, want %v", id, rev, y, x))
				continue
			}
			for name, at := range a.atts {
				s.atts++
				bt := b.atts[name]
				if at.digest != bt.digest {
					s.digestDiffs++
					if at.encoding == "" && bt.encoding != "" {
						s.digestDiffsEncoded++
					}
				}
				at.digest, bt.digest, at.encoding, bt.encoding = "", "", "", ""
				if at != bt {
					diffs = append(diffs, fmt.Sprintf("%s %s: attachment %s %+v, want %+v", id, rev, name, bt, at))
				}
			}
		}
	}
	for _, id := range sortedKeys(dst) {
		if src[id] == nil {
			diffs = append(diffs, id+": not in the source")
		}
	}
	return diffs, s
}

// requestShape is one kind of request a replicator sent: the db's and
// doc ids' places in the path and the values that vary in the query are
// placeholders.
type requestShape struct {
	Role           string            `json:"role"` // source, target or server (a path outside the dbs)
	Method         string            `json:"method"`
	Path           string            `json:"path"`
	Query          map[string]string `json:"query,omitempty"`
	Accept         string            `json:"accept,omitempty"`
	ContentType    string            `json:"content_type,omitempty"`
	AcceptEncoding string            `json:"accept_encoding,omitempty"`
}

// shapeRecorder is a reverse proxy to minicouch that records the shape of
// every request it passes on, and the statuses minicouch answered.
type shapeRecorder struct {
	t     *testing.T
	proxy *httputil.ReverseProxy
	roles map[string]string // db name → role
	mu    sync.Mutex
	seen  map[string]requestShape
	codes map[string]map[int]int // shape key → status → count
}

func newShapeRecorder(t *testing.T, target string, roles map[string]string) *shapeRecorder {
	u, _ := url.Parse(target)
	p := httputil.NewSingleHostReverseProxy(u)
	p.FlushInterval = -1
	return &shapeRecorder{t: t, proxy: p, roles: roles, seen: map[string]requestShape{}, codes: map[string]map[int]int{}}
}

// placeholders replace the query values that vary from one request to the
// next.
var placeholders = map[string]string{"open_revs": "{revs}", "atts_since": "{revs}", "since": "{seq}", "rev": "{rev}"}

func (s *shapeRecorder) shape(r *http.Request) requestShape {
	sh := requestShape{Method: r.Method, Accept: r.Header.Get("Accept"), AcceptEncoding: r.Header.Get("Accept-Encoding")}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		sh.ContentType = ct
		if mt, params, err := mime.ParseMediaType(ct); err == nil && params["boundary"] != "" {
			params["boundary"] = "{boundary}"
			sh.ContentType = mime.FormatMediaType(mt, params)
		}
	}
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	db, _ := url.PathUnescape(segs[0])
	path := []string{segs[0]}
	if role, ok := s.roles[db]; ok {
		sh.Role = role
		path[0] = "{db}"
		rest := segs[1:]
		if len(rest) > 0 {
			first, _ := url.PathUnescape(rest[0])
			switch {
			case first == "" && len(rest) == 1: // CouchDB's replicator asks for /{db}/
				path, rest = append(path, ""), nil
			case (first == "_local" || first == "_design") && len(rest) > 1:
				path, rest = append(path, first, "{docid}"), rest[2:]
			case strings.HasPrefix(first, "_design/") || strings.HasPrefix(first, "_local/"):
				p, _, _ := strings.Cut(first, "/")
				path, rest = append(path, p+"%2F{docid}"), rest[1:]
			case strings.HasPrefix(first, "_"):
				path, rest = append(path, first), rest[1:]
			default:
				path, rest = append(path, "{docid}"), rest[1:]
			}
			if len(rest) > 0 {
				path = append(path, "{attachment}")
			}
		}
	} else {
		sh.Role = "server"
		path = segs
	}
	sh.Path = "/" + strings.Join(path, "/")
	for k, v := range r.URL.Query() {
		if sh.Query == nil {
			sh.Query = map[string]string{}
		}
		if p, ok := placeholders[k]; ok {
			sh.Query[k] = p
		} else {
			sh.Query[k] = strings.Join(v, ",")
		}
	}
	return sh
}

func (s *shapeRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sh := s.shape(r)
	key, _ := json.Marshal(sh)
	sw := &statusWriter{ResponseWriter: w, code: 200}
	s.proxy.ServeHTTP(sw, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[string(key)] = sh
	if s.codes[string(key)] == nil {
		s.codes[string(key)] = map[int]int{}
	}
	s.codes[string(key)][sw.code]++
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish logs the shapes with minicouch's statuses and, with
// COUCHEPI_RECORD_REQUESTS=path, writes them there as JSON.
func (s *shapeRecorder) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := sortedKeys(s.seen)
	var shapes []requestShape
	for _, k := range keys {
		shapes = append(shapes, s.seen[k])
		s.t.Logf("request shape %s → statuses %v", k, s.codes[k])
	}
	path := os.Getenv("COUCHEPI_RECORD_REQUESTS")
	if path == "" {
		return
	}
	out, _ := json.MarshalIndent(shapes, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("wrote %d request shapes to %s", len(shapes), path)
}
