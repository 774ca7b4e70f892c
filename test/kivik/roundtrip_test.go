package kivik

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/go-kivik/kivik/v4"
	_ "github.com/go-kivik/kivik/v4/couchdb" // the "couch" driver
)

func TestMain(m *testing.M) { os.Exit(minicouchtest.Main(m)) }

// build builds pkg of the repository into a temporary directory.
func build(t *testing.T, pkg string) string {
	t.Helper()
	root, _ := filepath.Abs("../..")
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// TestKivikRoundTrip drives minicouch with kivik through a proxy that
// counts gzip-encoded request bodies and refused requests.
func TestKivikRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs minicouch and the replicator")
	}
	couch := minicouchtest.Start(t, minicouchtest.Options{
		Bin:     build(t, "./examples/minicouch"),
		Plugins: []string{build(t, "./plugin/cmd/replicator")},
	})
	target, _ := url.Parse(strings.TrimSuffix(couch.URL, "/"))
	var gzipped, refused atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode == 400 || resp.StatusCode == 415 {
			refused.Add(1)
			t.Logf("refused: %s %s: %d", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode)
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") == "gzip" {
			gzipped.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	dsn := "http://admin:pass@" + strings.TrimPrefix(srv.URL, "http://") + "/"
	client, err := kivik.New("couch", dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if err := client.CreateDB(ctx, "kv"); err != nil {
		t.Fatal(err)
	}
	db := client.DB("kv")
	for i := 0; i < 5; i++ {
		if _, err := db.Put(ctx, fmt.Sprintf("d%d", i), map[string]any{"n": i, "text": strings.Repeat("x", 2000)}); err != nil {
			t.Fatalf("put d%d: %v", i, err)
		}
	}
	id, rev, err := db.CreateDoc(ctx, map[string]any{"n": 10})
	if err != nil || id == "" || !strings.HasPrefix(rev, "1-") {
		t.Fatalf("create doc: %q %q %v", id, rev, err)
	}
	rev, err = db.GetRev(ctx, "d0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.PutAttachment(ctx, "d0", &kivik.Attachment{Filename: "a.txt", ContentType: "text/plain",
		Content: io.NopCloser(strings.NewReader("hello"))}, kivik.Rev(rev)); err != nil {
		t.Fatalf("put attachment: %v", err)
	}
	att, err := db.GetAttachment(ctx, "d0", "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(att.Content)
	att.Content.Close()
	if string(body) != "hello" || att.ContentType != "text/plain" {
		t.Errorf("attachment read back: %q %q", body, att.ContentType)
	}
	var doc struct {
		N int `json:"n"`
	}
	if err := db.Get(ctx, "d3").ScanDoc(&doc); err != nil || doc.N != 3 {
		t.Errorf("get d3: %+v %v", doc, err)
	}

	if err := db.CreateIndex(ctx, "by-n", "n", map[string]any{"fields": []string{"n"}}); err != nil {
		t.Fatalf("create index: %v", err)
	}
	rows := db.Find(ctx, map[string]any{"selector": map[string]any{"n": map[string]any{"$gte": 3}}, "sort": []string{"n"}})
	var ns []int
	for rows.Next() {
		var d struct {
			N int `json:"n"`
		}
		rows.ScanDoc(&d)
		ns = append(ns, d.N)
	}
	if err := rows.Err(); err != nil || fmt.Sprint(ns) != "[3 4 10]" {
		t.Errorf("_find through the index: %v, %v", ns, err)
	}
	if meta, err := rows.Metadata(); err != nil || meta.Warning != "" {
		t.Errorf("_find did not use the index: %+v %v", meta, err)
	}
	changes := db.Changes(ctx)
	seen := 0
	for changes.Next() {
		seen++
	}
	if err := changes.Err(); err != nil || seen != 7 { // six docs and the index's design doc
		t.Errorf("_changes: %d rows, %v", seen, err)
	}

	// Replication through kivik: a _replicator doc the plugin runs.
	rep, err := client.Replicate(ctx, couch.AdminURL+"kvcopy", couch.AdminURL+"kv", kivik.Param("create_target", true))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for rep.IsActive() {
		if time.Now().After(deadline) {
			t.Fatalf("replication still %s", rep.State())
		}
		time.Sleep(200 * time.Millisecond)
		if err := rep.Update(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if rep.State() != kivik.ReplicationComplete || rep.Err() != nil {
		t.Fatalf("replication ended %s: %v", rep.State(), rep.Err())
	}
	copied := client.DB("kvcopy")
	att, err = copied.GetAttachment(ctx, "d0", "a.txt")
	if err != nil {
		t.Fatalf("replicated attachment: %v", err)
	}
	body, _ = io.ReadAll(att.Content)
	att.Content.Close()
	if string(body) != "hello" {
		t.Errorf("replicated attachment: %q", body)
	}
	stats, err := copied.Stats(ctx)
	if err != nil || stats.DocCount != 7 {
		t.Errorf("replicated db: %+v %v", stats, err)
	}

	if gzipped.Load() == 0 {
		t.Error("kivik sent no gzip-encoded body: the test proves nothing about them")
	}
	if refused.Load() != 0 {
		t.Errorf("%d requests refused with 400 or 415", refused.Load())
	}
	t.Logf("%d gzip-encoded request bodies accepted", gzipped.Load())
}
