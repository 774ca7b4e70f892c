package couchapi

import "testing"

func TestParseDocReplicationFields(t *testing.T) {
	tests := []struct{ in, body string }{
		{`{"_id":"r","source":"a","_replication_state":"completed","owner":"x"}`, `{"source":"a","owner":"x","_replication_state":"completed"}`},
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
