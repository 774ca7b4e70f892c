package store

import (
	"context"
	"strings"
	"testing"
)

func TestParseDoc(t *testing.T) {
	for _, tc := range []struct {
		in      string
		err     string // "" = ok; else the CouchDB error string
		reason  string
		id, rev string
		body    string
		deleted bool
		natts   int
	}{
		{in: `{"_id":"a","x":1,"y":{"z":[1,2]}}`, id: "a", body: `{"x":1,"y":{"z":[1,2]}}`},
		{in: ` { "_id" : "a" , "b" : "c d" } `, id: "a", body: `{"b":"c d"}`},
		{in: `{"_id":"a","_rev":"1-abc","_deleted":true}`, id: "a", rev: "1-abc", body: `{}`, deleted: true},
		{in: `{"_id":"a","_conflicts":["1-x"],"_revs_info":[],"_local_seq":3,"k":"v"}`, id: "a", body: `{"k":"v"}`},
		{in: `{"_id":"a","_attachments":{"f.txt":{"content_type":"text/plain","data":"aGVsbG8="},"g":{"stub":true}}}`, id: "a", body: `{}`, natts: 2},
		{in: `{"_id":"_design/x"}`, id: "_design/x", body: `{}`},
		{in: `{"_id":"_local/x","_rev":"0-3"}`, id: "_local/x", rev: "0-3", body: `{}`},
		{in: `{"\u005fid":"esc","a":1}`, id: "esc", body: `{"a":1}`},
		{in: `[1]`, err: "bad_request", reason: "Document must be a JSON object"},
		{in: `{"a":`, err: "bad_request", reason: "invalid UTF-8 JSON"},
		{in: `{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, err: "bad_request", reason: "JSON nested too deeply: more than 10000 levels of objects and arrays"},
		{in: `{"_foo":1}`, err: "doc_validation", reason: "Bad special document member: _foo"},
		{in: `{"_id":1}`, err: "bad_request", reason: "Document id must be a string"},
		{in: `{"_id":"_bad"}`, err: "illegal_docid", reason: "Only reserved document ids may start with underscore."},
		{in: `{"_id":""}`, err: "illegal_docid", reason: "Document id must not be empty"},
		{in: `{"_id":"a","_rev":"abc"}`, err: "bad_request", reason: "Invalid rev format"},
		{in: `{"_id":"a","_attachments":{"f":{"data":"!!"}}}`, err: "bad_request"},
		{in: `{"_id":"a","_attachments":{"_f":{"data":""}}}`, err: "bad_request"},
		{in: `{"_id":"a","_revisions":{"start":0,"ids":[]}}`, err: "bad_request"},
		{in: `{"_id":"a","_rev":"2-x","_revisions":{"start":2,"ids":["y","a"]}}`, id: "a", rev: "2-y", body: `{}`},
		{in: `{"_id":"a","_revisions":{"start":3,"ids":["c","b"]},"_rev":"bogus","v":1}`, id: "a", rev: "3-c", body: `{"v":1}`},
		{in: `{"_id":"a","_rev":"1-"}`, id: "a", rev: "1-", body: `{}`},
		{in: `{"_id":"r","source":"s","_replication_state":"completed","_replication_state_time":"t","_replication_state_reason":"r","_replication_id":"i","_replication_stats":{"docs_read":1},"x":1}`, id: "r",
			body: `{"source":"s","_replication_state":"completed","_replication_state_time":"t","_replication_state_reason":"r","_replication_id":"i","_replication_stats":{"docs_read":1},"x":1}`},
		{in: `{"_replication_state":"x","_replication_bogus":1}`, err: "doc_validation", reason: "Bad special document member: _replication_bogus"},
		{in: `{"_id":"a","_deleted":"yes"}`, err: "doc_validation", reason: "Bad special document member: _deleted"},
		{in: `{"_id":"a","_revisions":[1]}`, err: "doc_validation", reason: "Bad special document member: _revisions"},
		{in: `{"_id":"a","_revisions":{"start":"1","ids":["a"]}}`, err: "doc_validation", reason: "_revisions.start isn't an integer."},
		{in: `{"_id":"a","_revisions":{"start":1,"ids":"a"}}`, err: "doc_validation", reason: "_revisions.ids isn't a array."},
		{in: `{"_id":"a","_revisions":{"start":1,"ids":[1]}}`, err: "doc_validation", reason: "RevId isn't a string"},
	} {
		d, err := ParseDoc([]byte(tc.in))
		if tc.err != "" {
			e, ok := err.(*Error)
			if !ok || e.Err != tc.err || (tc.reason != "" && e.Reason != tc.reason) {
				t.Errorf("ParseDoc(%s) err = %v, want %s %q", tc.in, err, tc.err, tc.reason)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseDoc(%s): %v", tc.in, err)
			continue
		}
		if d.ID != tc.id || d.Rev != tc.rev || string(d.Body) != tc.body || d.Deleted != tc.deleted || len(d.Attachments) != tc.natts {
			t.Errorf("ParseDoc(%s) = id %q rev %q body %s deleted %v atts %d", tc.in, d.ID, d.Rev, d.Body, d.Deleted, len(d.Attachments))
		}
	}
}

func TestParseDocAttachments(t *testing.T) {
	d := mustParse(t, `{"_attachments":{"a":{"data":"aGVsbG8="},"b":{"stub":true,"content_type":"x/y"},"c":{"follows":true,"length":5,"content_type":"t/p","encoding":"gzip"}}}`)
	a, b, c := d.Attachments[0], d.Attachments[1], d.Attachments[2]
	if a.Name != "a" || string(a.Data) != "hello" || a.ContentType != "application/octet-stream" {
		t.Errorf("a = %+v", a)
	}
	if b.Name != "b" || !b.Stub || b.ContentType != "x/y" {
		t.Errorf("b = %+v", b)
	}
	if c.Name != "c" || !c.Follows || c.Length != 5 || c.Encoding != "gzip" {
		t.Errorf("c = %+v", c)
	}
}

func TestValidateDocID(t *testing.T) {
	for id, ok := range map[string]bool{strings.Repeat("x", MaxDocIDLength+1): false, strings.Repeat("x", MaxDocIDLength): true, "a": true, "_design/a": true, "_local/a": true, "": false, "_x": false, string([]byte{0xff}): false, "a/b": true} {
		if err := ValidateDocID(id); (err == nil) != ok {
			t.Errorf("ValidateDocID(%q) = %v", id, err)
		}
	}
	if !strings.HasPrefix(LocalPrefix, "_") {
		t.Fatal("LocalPrefix")
	}
}

// TestBareRevReplicated stores a revision written as a bare "1-" with
// new_edits=false, as CouchDB accepts it (PouchDB issue 7829).
func TestBareRevReplicated(t *testing.T) {
	db := createTest(t, openTest(t), "d")
	putReplicated(t, db, `{"_id":"foo","_rev":"1-","integer":1}`)
	d, err := db.Get(context.Background(), "foo", GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := docJSON(t, d); got != `{"_id":"foo","_rev":"1-","integer":1}` {
		t.Errorf("got %s", got)
	}
}
