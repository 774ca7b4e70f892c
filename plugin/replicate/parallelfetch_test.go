package replicate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestIndividualFetchesInParallel: one worker fetches and writes the docs
// it cannot take through _bulk_get (here, docs with large attachments)
// several at a time, not one after the other: one at a time, a batch of
// 1 MiB attachments kept one core busy whatever worker_processes said
// (#40). Every doc still arrives whole.
func TestIndividualFetchesInParallel(t *testing.T) {
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("pouchdb-server answers open_revs with JSON (attachments inline)")
	}
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	const docs = 12
	want := map[string]string{}
	for i := 0; i < docs; i++ {
		id := fmt.Sprintf("d%02d", i)
		var put struct {
			Rev string `json:"rev"`
		}
		json.Unmarshal(s.mustDo(t, "PUT", src+"/"+id, map[string]any{"i": i}), &put)
		rev := put.Rev
		want[id] = putAttachment(t, s, src+"/"+id+"/blob.bin?rev="+rev, 300<<10) // past the inline bound
	}
	// A proxy before the source counts the individual GETs in flight.
	up, _ := url.Parse(s.Base)
	var inFlight, most atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(up)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.RawQuery, "open_revs") {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	rep := testRep(s, src, tgt)
	rep.Source = (&testServer{Kind: s.Kind, Base: proxy.URL + "/", User: s.User, Pass: s.Pass}).endpoint(src)
	rep.WorkerProcesses, rep.WorkerBatchSize = 1, 500
	res := runRep(t, rep, Options{})
	if res.Stats.DocsWritten != docs {
		t.Fatalf("docs_written %d, want %d", res.Stats.DocsWritten, docs)
	}
	for id, sum := range want {
		if got, _ := attachmentMD5(t, s, tgt, id, "blob.bin"); got != sum {
			t.Fatalf("%s: attachment md5 %s on the target, want %s", id, got, sum)
		}
	}
	if most.Load() < 2 {
		t.Fatalf("one worker fetched at most %d doc at a time, want up to %d", most.Load(), parallelFetches)
	}
}
