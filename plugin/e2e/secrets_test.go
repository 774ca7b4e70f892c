package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// secretsThroughQueue runs replications whose credentials are distinctive
// strings through c's job queue, in every form a replication carries
// them (URL userinfo, an `auth` object, a custom header, and the caller's
// Authorization header that a `_replicate` with local db names passes on),
// then deletes the persistent one. It returns those strings.
func secretsThroughQueue(t *testing.T, c *couch) []string {
	t.Helper()
	pw := fmt.Sprintf("Pw-%d-distinct", time.Now().UnixNano())
	token := fmt.Sprintf("XTok-%d-distinct", time.Now().UnixNano())
	basic := base64.StdEncoding.EncodeToString([]byte("sekrit:" + pw))
	c.must("PUT", "/_node/_local/_config/admins/sekrit", fmt.Sprintf("%q", pw), 200)
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 20)
	base := "http://" + c.addr + "/"
	doc := fmt.Sprintf(`{"source":%q,"target":{"url":%q,"auth":{"basic":{"username":"sekrit","password":%q}},"headers":{"X-Token":%q}},"continuous":true,"create_target":true}`,
		"http://sekrit:"+pw+"@"+c.addr+"/src", base+"tgt", pw, token)
	c.must("PUT", "/_replicator/secret", doc, 201)
	c.waitState("_replicator", "secret", "running", 30*time.Second)
	c.eventually("tgt has the docs", 30*time.Second, func() bool { return c.docCount("tgt") == 20 })
	code, body := c.reqAs("sekrit:"+pw, "POST", "/_replicate", `{"source":"src","target":"tgt2","create_target":true}`)
	if code != 200 {
		t.Fatalf("_replicate as sekrit: %d %s", code, body)
	}
	c.must("DELETE", "/_replicator/secret?rev="+c.revOf("/_replicator/secret"), "", 200)
	c.eventually("the deleted doc's job gone", 30*time.Second, func() bool { return c.schedDoc("_replicator", "secret") == nil })
	return []string{pw, token, basic}
}

// countIn counts the occurrences of each of needles in every file under
// root (a file or a directory).
func countIn(t *testing.T, root string, needles []string) map[string]int {
	t.Helper()
	found := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if k := bytes.Count(b, []byte(n)); k > 0 {
				found[n] += k
				t.Logf("%s holds %q %d times", path, n, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestE2ENoSecretsAtRestBolt (issue 30 item 12): after replications with
// credentials ran and the doc was deleted, the bolt job store holds none
// of the credentials, in live records or free pages.
func TestE2ENoSecretsAtRestBolt(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	secrets := secretsThroughQueue(t, c)
	store := filepath.Join(c.s.Data, "replicator.db")
	if _, err := os.Stat(store); err != nil {
		t.Fatal(err)
	}
	if found := countIn(t, store, secrets); len(found) != 0 {
		t.Fatalf("the bolt job store holds credentials: %v", found)
	}
	if fi, err := os.Stat(filepath.Join(c.s.Data, "replicator.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file beside the store: %v, %v", fi, err)
	}
}

// TestE2ENoSecretsAtRestEtcd (issue 30 item 12): the same on a queue in
// etcd: no file of etcd's data dir (its WAL, snapshots, data file) holds
// any of the credentials, without waiting for any compaction.
func TestE2ENoSecretsAtRestEtcd(t *testing.T) {
	t.Parallel()
	etcdc := etcdtest.StartCluster(t, 1)
	c := startClusterNode(t, etcdc.Endpoints(), fmt.Sprintf("secrets-%d/", time.Now().UnixNano()), true, true, "")
	secrets := secretsThroughQueue(t, c)
	for _, dir := range etcdc.DataDirs() {
		if found := countIn(t, dir, secrets); len(found) != 0 {
			t.Fatalf("etcd's data dir %s holds credentials: %v", dir, found)
		}
	}
}
