package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/couchepi/couchepi/internal/readmatrix"
)

// TestE2EReplicatorReadMatrix (issue 38 item 4): on minicouch, no read
// path of a replicator db shows a non-admin a credential or the stored
// revision of another user's doc. The same matrix runs against the kivik
// x/server host (examples/kivikserver).
func TestE2EReplicatorReadMatrix(t *testing.T) {
	c := startCouch(t, "max_jobs = 0\nmax_churn = 0\n")
	for _, u := range []string{"alice", "bob"} {
		c.must("PUT", "/_users/org.couchdb.user:"+u, fmt.Sprintf(`{"name":%q,"type":"user","roles":[],"password":"%spw"}`, u, u), 201)
	}
	c.must("PUT", "/_replicator/_security", `{"members":{"names":["alice","bob"]},"admins":{}}`, 200)
	c.must("PUT", "/_replicator/_design/peek", readmatrix.DesignDoc, 201)
	withCreds, creds := readmatrix.CredentialDoc(c.addr)
	docs := []readmatrix.Doc{{ID: "c2"}, {ID: "plain"}}
	for i, body := range []string{withCreds, readmatrix.PlainDoc(c.addr)} {
		if code, resp := c.reqAs("alice:alicepw", "PUT", "/_replicator/"+docs[i].ID, body); code != 201 {
			t.Fatalf("alice creates %s: %d %s", docs[i].ID, code, resp)
		}
	}
	// A second revision of c2, so that it has an ancestor.
	var c2 map[string]any
	json.Unmarshal([]byte(c.must("GET", "/_replicator/c2", "", 200)), &c2)
	c2["note"] = "second revision"
	b, _ := json.Marshal(c2)
	if code, resp := c.reqAs("alice:alicepw", "PUT", "/_replicator/c2", string(b)); code != 201 {
		t.Fatalf("alice updates c2: %d %s", code, resp)
	}
	for i := range docs {
		var d struct {
			Rev string `json:"_rev"`
		}
		json.Unmarshal([]byte(c.must("GET", "/_replicator/"+docs[i].ID, "", 200)), &d)
		docs[i].Rev = d.Rev
	}
	rows := readmatrix.Rows("_replicator", docs)
	answered, refused := readmatrix.Check(t, "http://"+c.addr, "bob", "bobpw", rows, readmatrix.Secrets(creds, docs))
	t.Logf("read matrix on minicouch: %d rows, %d answered, %d refused", len(rows), answered, refused)
	if code, body := c.reqAs("bob:bobpw", "GET", "/_replicator/c2", ""); code != 200 {
		t.Errorf("bob reads c2: %d %s", code, body)
	}
}
