package jsfilter

import (
	"strings"
	"testing"
	"time"
)

func TestFilter(t *testing.T) {
	req := Request{Query: map[string]string{"type": "odd"}, UserCtx: []byte(`{"name":"bob","roles":[]}`)}
	tests := []struct {
		src  string
		doc  string
		want bool
	}{
		{`function(doc, req) { return doc.type == req.query.type; }`, `{"type":"odd"}`, true},
		{`function(doc, req) { return doc.type == req.query.type; }`, `{"type":"even"}`, false},
		{`function(doc, req) { return req.userCtx.name === "bob"; }`, `{}`, true},
		{`function(doc) { return doc._deleted; }`, `{"_deleted":true}`, true},
		{`function(doc) { if (doc.x) return 1; }`, `{}`, false},
	}
	for _, tc := range tests {
		f, err := NewFilter(tc.src, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Pass([]byte(tc.doc))
		if err != nil || got != tc.want {
			t.Errorf("%s on %s: %v %v", tc.src, tc.doc, got, err)
		}
	}
}

func TestViewFilter(t *testing.T) {
	f, err := NewViewFilter(`function(doc) { if (doc.n > 1) emit(doc._id, null); }`)
	if err != nil {
		t.Fatal(err)
	}
	for doc, want := range map[string]bool{`{"_id":"a","n":2}`: true, `{"_id":"b","n":1}`: false} {
		if got, err := f.Pass([]byte(doc)); err != nil || got != want {
			t.Errorf("%s: %v %v", doc, got, err)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := NewFilter(`function(doc {`, Request{}); err == nil {
		t.Error("syntax error accepted")
	}
	if _, err := NewFilter(`42`, Request{}); err == nil {
		t.Error("non-function accepted")
	}
	f, _ := NewFilter(`function(doc) { throw "boom"; }`, Request{})
	if _, err := f.Pass([]byte(`{}`)); err == nil {
		t.Error("throw not reported")
	}
	f, _ = NewFilter(`function(doc) { while(true){} }`, Request{})
	f.Timeout = 50 * time.Millisecond
	if _, err := f.Pass([]byte(`{}`)); err == nil || !strings.Contains(err.Error(), "os_process_timeout") {
		t.Errorf("endless loop: %v", err)
	}
	// The runtime is usable after an interrupt.
	f2, _ := NewFilter(`function(doc) { return true; }`, Request{})
	if ok, err := f2.Pass([]byte(`{}`)); !ok || err != nil {
		t.Error(ok, err)
	}
}
