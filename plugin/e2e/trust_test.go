package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Regression tests for the defects of issue 11 (trust: security and
// correctness), end to end through minicouch and the plugin process.

// TestE2ELegacyStateFieldsStripped (issue 11 item 12): a new doc written in
// a legacy state ("triggered", "error") loses every _replication_* field,
// as CouchDB 3.x removes them, and then runs; completed docs keep theirs.
func TestE2ELegacyStateFieldsStripped(t *testing.T) {
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 3)
	legacy := `,"create_target":true,"continuous":true,"_replication_state":"%s","_replication_id":"x","_replication_state_time":"2020-01-01T00:00:00Z","_replication_state_reason":"old","_replication_stats":{"docs_written":99}`
	for _, state := range []string{"triggered", "error"} {
		id := "legacy-" + state
		c.must("PUT", "/_replicator/"+id, c.repDoc("src", "tgt-"+state, strings.Replace(legacy, "%s", state, 1)), 201)
		var doc map[string]any
		c.eventually(id+" stripped", 20*time.Second, func() bool {
			code, body := c.req("GET", "/_replicator/"+id, "")
			doc = nil
			json.Unmarshal([]byte(body), &doc)
			if code != 200 {
				return false
			}
			for k := range doc {
				if strings.HasPrefix(k, "_replication_") {
					return false
				}
			}
			return true
		})
		c.eventually(id+" replicated", 20*time.Second, func() bool { return c.docCount("tgt-"+state) == 3 })
	}
	c.must("PUT", "/_replicator/done", c.repDoc("src", "tgt-done", `,"_replication_state":"completed","_replication_id":"x"`), 201)
	time.Sleep(2 * time.Second)
	body := c.must("GET", "/_replicator/done", "", 200)
	if !strings.Contains(body, `"_replication_id":"x"`) {
		t.Fatalf("completed doc lost its fields: %s", body)
	}
}

// TestE2EReplicatorDocOwnership (issue 11 items 2 and 3): a non-admin who
// does not own a `_replicator` doc sees no credential on any read path,
// never learns its stored revision, and cannot replace or delete it: not
// with PUT or DELETE and the real rev, nor with _bulk_docs new_edits=false.
func TestE2EReplicatorDocOwnership(t *testing.T) {
	c := startCouch(t, "max_jobs = 0\nmax_churn = 0\n")
	for _, u := range []string{"alice", "bob"} {
		c.must("PUT", "/_users/org.couchdb.user:"+u, fmt.Sprintf(`{"name":%q,"type":"user","roles":[],"password":"%spw"}`, u, u), 201)
	}
	c.must("PUT", "/_replicator/_security", `{"members":{"names":["alice","bob"]},"admins":{}}`, 200)
	secretSrc := "http://u1:secret1@" + c.addr + "/src"
	doc := fmt.Sprintf(`{"source":{"url":%q,"headers":{"Authorization":"Basic c2VjcmV0Mg=="},"auth":{"basic":{"username":"u2","password":"secret2"}}},"target":{"url":"http://u3:secret3@%s/tgt"},"source_proxy":"http://pu:secret4@127.0.0.1:1","target_proxy":"http://pu:secret4@127.0.0.1:1"}`, secretSrc, c.addr)
	doc = strings.Replace(doc, `,"target_proxy":"http://pu:secret4@127.0.0.1:1"`, "", 1)
	if code, body := c.reqAs("alice:alicepw", "PUT", "/_replicator/c2", doc); code != 201 {
		t.Fatalf("alice creates c2: %d %s", code, body)
	}
	var stored struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal([]byte(c.must("GET", "/_replicator/c2", "", 200)), &stored)
	secrets := []string{"secret1", "secret2", "secret3", "secret4", "c2VjcmV0Mg", stored.Rev}
	reads := []struct{ method, path, body string }{
		{"GET", "/_replicator/c2", ""},
		{"GET", "/_replicator/c2?revs=true", ""},
		{"GET", "/_replicator/c2?revs_info=true", ""},
		{"GET", "/_replicator/c2?conflicts=true&deleted_conflicts=true&meta=true", ""},
		{"GET", "/_replicator/c2?attachments=true&att_encoding_info=true", ""},
		{"GET", "/_replicator/c2?open_revs=all", ""},
		{"GET", "/_replicator/c2?open_revs=[\"" + stored.Rev + "\"]", ""},
		{"GET", "/_replicator/c2?latest=true&local_seq=true", ""},
		{"GET", "/_replicator/_all_docs?include_docs=true", ""},
		{"POST", "/_replicator/_all_docs?include_docs=true", `{"keys":["c2"]}`},
		{"GET", "/_replicator/_changes?include_docs=true", ""},
		{"GET", "/_replicator/_changes?include_docs=true&style=all_docs&conflicts=true", ""},
		{"POST", "/_replicator/_bulk_get?revs=true", `{"docs":[{"id":"c2"}]}`},
		{"POST", "/_replicator/_find", `{"selector":{"_id":"c2"}}`},
		{"POST", "/_replicator/_revs_diff", `{"c2":["9-0123456789abcdef0123456789abcdef"]}`},
		{"POST", "/_replicator/_missing_revs", `{"c2":["9-0123456789abcdef0123456789abcdef"]}`},
	}
	for _, r := range reads {
		code, body := c.reqAs("bob:bobpw", r.method, r.path, r.body)
		if code == 401 || code == 403 {
			continue // minicouch keeps some replicator-db reads for admins
		}
		if code != 200 {
			t.Errorf("bob %s %s: %d %s", r.method, r.path, code, body)
			continue
		}
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("bob %s %s: body reveals %q: %s", r.method, r.path, s, body)
			}
		}
	}
	req, _ := http.NewRequest("GET", "http://"+c.addr+"/_replicator/c2", nil)
	req.SetBasicAuth("bob", "bobpw")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if etag := resp.Header.Get("ETag"); strings.Contains(etag, stored.Rev) {
			t.Errorf("ETag reveals the stored rev to a non-owner: %s", etag)
		}
	}
	if code, body := c.reqAs("alice:alicepw", "GET", "/_replicator/c2", ""); code != 200 || !strings.Contains(body, "secret1") {
		t.Errorf("the owner must see her doc as stored: %d %s", code, body)
	}
	// _revs_diff diffs against the revision bob is shown: it is not
	// missing, the stored one is (he cannot tell it exists), and only the
	// shown one is a possible ancestor. The owner and admins diff against
	// the stored revisions.
	var shown struct {
		Rev string `json:"_rev"`
	}
	_, body := c.reqAs("bob:bobpw", "GET", "/_replicator/c2", "")
	json.Unmarshal([]byte(body), &shown)
	later := "9-0123456789abcdef0123456789abcdef"
	diffs := []struct{ who, ask, want string }{
		{"bob:bobpw", `{"c2":["` + shown.Rev + `"]}`, `{}`},
		{"bob:bobpw", `{"c2":["` + stored.Rev + `","` + later + `"]}`, `{"c2":{"missing":["` + stored.Rev + `","` + later + `"],"possible_ancestors":["` + shown.Rev + `"]}}`},
		{"alice:alicepw", `{"c2":["` + stored.Rev + `","` + later + `"]}`, `{"c2":{"missing":["` + later + `"],"possible_ancestors":["` + stored.Rev + `"]}}`},
		{"admin:pass", `{"c2":["` + shown.Rev + `"]}`, `{"c2":{"missing":["` + shown.Rev + `"]}}`},
	}
	for _, d := range diffs {
		if code, body := c.reqAs(d.who, "POST", "/_replicator/_revs_diff", d.ask); code != 200 || body != d.want {
			t.Errorf("%s _revs_diff %s: %d %s, want %s", strings.Split(d.who, ":")[0], d.ask, code, body, d.want)
		}
	}

	// Takeover attempts by bob, even knowing the stored rev.
	bobsTarget := `"target":"http://bob:bobpw@` + c.addr + `/bobdb"`
	takeovers := []struct{ name, method, path, body string }{
		{"put with the real rev", "PUT", "/_replicator/c2", `{"_rev":"` + stored.Rev + `","source":"http://` + c.addr + `/src",` + bobsTarget + `}`},
		{"put claiming alice", "PUT", "/_replicator/c2", `{"_rev":"` + stored.Rev + `","owner":"alice","source":"http://` + c.addr + `/src",` + bobsTarget + `}`},
		{"delete with the real rev", "DELETE", "/_replicator/c2?rev=" + stored.Rev, ""},
		{"new_edits false", "POST", "/_replicator/_bulk_docs", `{"new_edits":false,"docs":[{"_id":"c2","_rev":"61-0123456789abcdef0123456789abcdef","source":"http://` + c.addr + `/src",` + bobsTarget + `}]}`},
		{"bulk update", "POST", "/_replicator/_bulk_docs", `{"docs":[{"_id":"c2","_rev":"` + stored.Rev + `","source":"http://` + c.addr + `/src",` + bobsTarget + `}]}`},
	}
	for _, tc := range takeovers {
		code, body := c.reqAs("bob:bobpw", tc.method, tc.path, tc.body)
		if code < 400 && !strings.Contains(body, `"forbidden"`) {
			t.Errorf("%s: %d %s, want forbidden", tc.name, code, body)
		}
	}
	after := c.must("GET", "/_replicator/c2", "", 200)
	if !strings.Contains(after, stored.Rev) || strings.Contains(after, "bobdb") {
		t.Fatalf("alice's doc changed hands: %s", after)
	}
	// Bob still owns what he creates.
	if code, body := c.reqAs("bob:bobpw", "PUT", "/_replicator/bobs", `{"source":"http://`+c.addr+`/src",`+bobsTarget+`}`); code != 201 {
		t.Fatalf("bob creates his own doc: %d %s", code, body)
	}
}

// TestE2EMaxJobsZeroAtStart (issue 11 item 11): `[replicator] max_jobs = 0`
// holds from the first moment, set in the ini file or at runtime alike.
func TestE2EMaxJobsZeroAtStart(t *testing.T) {
	for _, how := range []string{"ini", "runtime"} {
		t.Run(how, func(t *testing.T) {
			extra := ""
			if how == "ini" {
				extra = "max_jobs = 0\n"
			}
			c := startCouch(t, extra)
			if how == "runtime" {
				c.must("PUT", "/_node/_local/_config/replicator/max_jobs", `"0"`, 200)
			}
			c.must("PUT", "/src", "", 201)
			c.putDocs("src", 0, 5)
			c.must("PUT", "/_replicator/r", c.repDoc("src", "tgt", `,"continuous":true,"create_target":true`), 201)
			time.Sleep(3 * time.Second)
			if n := c.docCount("tgt"); n > 0 {
				t.Fatalf("max_jobs = 0 (%s) but %d docs were replicated", how, n)
			}
			body := c.must("GET", "/_scheduler/jobs", "", 200)
			if strings.Contains(body, `"pid":"`) {
				t.Fatalf("max_jobs = 0 (%s) but a job runs: %s", how, body)
			}
		})
	}
}

// TestE2EFinishedTransientJobLookup (issue 11 item 14): a finished
// `POST /_replicate` job stays visible at `_scheduler/jobs/{rep id}` for
// transient_job_max_age_sec, under its id as given and with "+" sent as a
// space (form decoding).
func TestE2EFinishedTransientJobLookup(t *testing.T) {
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.must("PUT", "/tgt", "", 201)
	c.putDocs("src", 0, 3)
	// A continuous job's answer names its id; the one-shot job of the same
	// endpoints has the same base id without the suffix.
	body := c.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true}`, c.endpoint("src"), c.endpoint("tgt")), 202)
	var res struct {
		OK      bool   `json:"ok"`
		LocalID string `json:"_local_id"`
	}
	json.Unmarshal([]byte(body), &res)
	if !strings.HasSuffix(res.LocalID, "+continuous") {
		t.Fatalf("continuous _replicate: %s", body)
	}
	for _, id := range []string{res.LocalID, strings.ReplaceAll(res.LocalID, "+", "%20")} {
		c.eventually("continuous job listed as "+id, 10*time.Second, func() bool {
			code, _ := c.req("GET", "/_scheduler/jobs/"+id, "")
			return code == 200
		})
	}
	c.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"cancel":true}`, c.endpoint("src"), c.endpoint("tgt")), 200)
	base := strings.TrimSuffix(res.LocalID, "+continuous")
	body = c.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q}`, c.endpoint("src"), c.endpoint("tgt")), 200)
	if !strings.Contains(body, `"ok":true`) {
		t.Fatalf("one-shot _replicate: %s", body)
	}
	time.Sleep(1500 * time.Millisecond) // a scheduler interval after finishing
	code, got := c.req("GET", "/_scheduler/jobs/"+base, "")
	if code != 200 || !strings.Contains(got, base) {
		t.Errorf("GET /_scheduler/jobs/%s after completion: %d %s", base, code, got)
	}
}

// TestE2ECancelStopsWriting (issue 11 items 9 and 10): once a cancel of a
// continuous _replicate answers 200, nothing more reaches the target, and
// the work done since the last interval checkpoint is checkpointed, so the
// same replication started again at once resumes with cumulative stats
// instead of re-reading everything.
func TestE2ECancelStopsWriting(t *testing.T) {
	// checkpoint_interval far away: only the stop can checkpoint.
	c := startCouch(t, "checkpoint_interval = 600000\n")
	c.must("PUT", "/src", "", 201)
	c.must("PUT", "/tgt", "", 201)
	c.putDocs("src", 0, 10)
	body := fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true`, c.endpoint("src"), c.endpoint("tgt"))
	c.must("POST", "/_replicate", body+"}", 202)
	c.eventually("first docs replicated", 20*time.Second, func() bool { return c.docCount("tgt") == 10 })
	c.must("POST", "/_replicate", body+`,"cancel":true}`, 200)

	// Item 10: restarted at once, the job resumes from the checkpoint its
	// stop wrote: the 10 docs it wrote count, nothing is re-read.
	c.must("POST", "/_replicate", body+"}", 202)
	type taskStats struct {
		DocsRead    int `json:"docs_read"`
		DocsWritten int `json:"docs_written"`
	}
	var stats taskStats
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && stats.DocsWritten < 10 {
		time.Sleep(200 * time.Millisecond)
		_, b := c.req("GET", "/_active_tasks", "")
		var tasks []json.RawMessage
		json.Unmarshal([]byte(b), &tasks)
		for _, task := range tasks {
			if strings.Contains(string(task), `"type":"replication"`) {
				json.Unmarshal(task, &stats)
			}
		}
	}
	if stats.DocsWritten != 10 || stats.DocsRead != 10 {
		t.Errorf("resumed run stats %+v, want docs_read 10, docs_written 10 (cumulative from the stop checkpoint)", stats)
	}

	// Item 9: after the cancel answers, nothing more is written.
	c.must("POST", "/_replicate", body+`,"cancel":true}`, 200)
	after := c.docCount("tgt")
	c.must("POST", "/src/_bulk_docs", `{"docs":[{"_id":"late1"},{"_id":"late2"}]}`, 201)
	time.Sleep(1500 * time.Millisecond)
	if got := c.docCount("tgt"); got != after {
		t.Fatalf("target went from %d to %d docs after the cancel answered", after, got)
	}
}
