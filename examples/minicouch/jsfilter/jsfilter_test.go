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

func TestValidator(t *testing.T) {
	v, err := NewValidator([]string{
		`function(newDoc, oldDoc, userCtx, secObj) { if (!newDoc.foo) throw({forbidden: 'Document must have a foo.'}); }`,
		`function(newDoc, oldDoc, userCtx) { if (newDoc.locked && userCtx.name !== 'admin') throw({unauthorized: 'locked'}); if (oldDoc && oldDoc.frozen) throw({forbidden: 'frozen'}); }`,
		`function(newDoc) { if (newDoc.boom) throw new Error('boom'); }`,
	})
	if err != nil {
		t.Fatal(err)
	}
	user := []byte(`{"db":"d","name":"bob","roles":[]}`)
	tests := []struct {
		doc, old string
		status   int // 0 = accepted, -1 = other error
		reason   string
	}{
		{`{"foo":1}`, "", 0, ""},
		{`{"bar":1}`, "", 403, "Document must have a foo."},
		{`{"foo":1,"locked":true}`, "", 401, "locked"},
		{`{"foo":1}`, `{"frozen":true}`, 403, "frozen"},
		{`{"foo":1,"boom":true}`, "", -1, ""},
	}
	for _, tc := range tests {
		var old []byte
		if tc.old != "" {
			old = []byte(tc.old)
		}
		err := v.Validate([]byte(tc.doc), old, user, []byte(`{}`))
		switch {
		case tc.status == 0 && err != nil:
			t.Errorf("%s: %v", tc.doc, err)
		case tc.status > 0:
			r, ok := err.(*Rejection)
			if !ok || r.Status != tc.status || r.Reason != tc.reason {
				t.Errorf("%s: %v, want %d %s", tc.doc, err, tc.status, tc.reason)
			}
		case tc.status < 0:
			if _, ok := err.(*Rejection); ok || err == nil {
				t.Errorf("%s: %v, want a plain error", tc.doc, err)
			}
		}
	}
}
