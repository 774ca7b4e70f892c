package couchapi

import "testing"

func TestParseDocReplicationFields(t *testing.T) {
	tests := []struct{ in, body string }{
		{`{"_id":"r","source":"a","_replication_state":"completed","owner":"x"}`, `{"source":"a","_replication_state":"completed","owner":"x"}`},
		{`{"_id":"r","_replication_stats":{"docs_read":1}}`, `{"_replication_stats":{"docs_read":1}}`},
		{`{"_id":"r","a":1}`, `{"a":1}`},
	}
	for _, tc := range tests {
		d, err := parseDoc([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if d.ID != "r" || string(d.Body) != tc.body {
			t.Errorf("%s: id %q body %s, want %s", tc.in, d.ID, d.Body, tc.body)
		}
	}
	if _, err := parseDoc([]byte(`{"_replication_state":1,"_bogus":2}`)); err == nil {
		t.Error("other special members must still be rejected")
	}
}

func TestParseDocRevisionsWin(t *testing.T) {
	d, err := parseDoc([]byte(`{"_id":"foo","_rev":"2-b","_revisions":{"start":3,"ids":["c","c","a"]},"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Rev != "3-c" || d.Revisions.Start != 3 || string(d.Body) != `{"v":1}` {
		t.Errorf("got rev %s revisions %+v body %s", d.Rev, d.Revisions, d.Body)
	}
}
