package couchapi

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestSplitBulkDocs(t *testing.T) {
	f, tr := false, true
	tests := []struct {
		name     string
		body     string
		docs     []string
		newEdits *bool
		ok       bool
	}{
		{name: "plain", body: `{"docs":[{"_id":"a"},{"_id":"b","s":"]}\"{"}]}`, docs: []string{`{"_id":"a"}`, `{"_id":"b","s":"]}\"{"}`}, ok: true},
		{name: "new_edits false, spaces", body: " { \"new_edits\" : false , \"docs\" : [ {\"_id\" : \"a\"} , null ] } ", docs: []string{`{"_id" : "a"}`, `null`}, newEdits: &f, ok: true},
		{name: "new_edits true, other keys", body: `{"all_or_nothing":{"x":[1]},"new_edits":true,"docs":[]}`, docs: []string{}, newEdits: &tr, ok: true},
		{name: "new_edits null", body: `{"docs":[1],"new_edits":null}`, docs: []string{`1`}, ok: true},
		{name: "no docs", body: `{"new_edits":false}`},
		{name: "docs not an array", body: `{"docs":{}}`},
		{name: "docs null", body: `{"docs":null}`},
		{name: "new_edits a string", body: `{"docs":[],"new_edits":"false"}`},
		{name: "key in other case", body: `{"Docs":[],"docs":[]}`},
		{name: "escaped key", body: `{"doc\u0073":[]}`},
		{name: "repeated docs", body: `{"docs":[1],"docs":[2]}`},
		{name: "array body", body: `[{"docs":[]}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.body)) {
				t.Fatalf("test body is not valid JSON")
			}
			docs, ne, ok := splitBulkDocs([]byte(tc.body))
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			got := []string{}
			for _, d := range docs {
				got = append(got, string(d))
			}
			if !reflect.DeepEqual(got, tc.docs) || !reflect.DeepEqual(ne, tc.newEdits) {
				t.Fatalf("got %q %v, want %q %v", got, ne, tc.docs, tc.newEdits)
			}
			// Where the scanner answers, encoding/json must agree.
			var body struct {
				Docs     *[]json.RawMessage `json:"docs"`
				NewEdits *bool              `json:"new_edits"`
			}
			if err := json.Unmarshal([]byte(tc.body), &body); err != nil || body.Docs == nil || len(*body.Docs) != len(docs) {
				t.Fatalf("encoding/json disagrees: %v %v", err, body.Docs)
			}
			for i, d := range *body.Docs {
				if string(d) != string(docs[i]) {
					t.Fatalf("doc %d: encoding/json %s, scanner %s", i, d, docs[i])
				}
			}
		})
	}
}

// FuzzSplitBulkDocs checks the scanner agrees with encoding/json on every
// valid body it accepts.
func FuzzSplitBulkDocs(f *testing.F) {
	f.Add([]byte(`{"docs":[{"_id":"a"}],"new_edits":false}`))
	f.Add([]byte(`{"x":"\\\"","docs":[[],{},"s",1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !validJSON(b) {
			return
		}
		docs, ne, ok := splitBulkDocs(b)
		if !ok {
			return
		}
		var body struct {
			Docs     *[]json.RawMessage `json:"docs"`
			NewEdits *bool              `json:"new_edits"`
		}
		if err := json.Unmarshal(b, &body); err != nil || body.Docs == nil {
			t.Fatalf("scanner accepted %q, encoding/json: %v", b, err)
		}
		if len(*body.Docs) != len(docs) || (ne == nil) != (body.NewEdits == nil) || ne != nil && *ne != *body.NewEdits {
			t.Fatalf("%q: scanner %d docs %v, encoding/json %d docs %v", b, len(docs), ne, len(*body.Docs), body.NewEdits)
		}
		for i, d := range *body.Docs {
			if string(d) != string(docs[i]) {
				t.Fatalf("doc %d: encoding/json %s, scanner %s", i, d, docs[i])
			}
		}
	})
}
