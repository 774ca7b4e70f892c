package mango

import (
	"encoding/json"
	"testing"
)

// TestPlan: the index the planner picks for a selector and sort, as
// CouchDB's planner ranks them, and the sorts it refuses.
func TestPlan(t *testing.T) {
	defs := []IndexDef{
		{DDoc: "_design/a", Name: "ab", Fields: []string{"a", "b"}},
		{DDoc: "_design/b", Name: "a", Fields: []string{"a"}},
		{DDoc: "_design/c", Name: "p", Fields: []string{"a"}, Partial: json.RawMessage(`{"t":{"$eq":1}}`)},
		{DDoc: "_design/d", Name: "n", Fields: []string{"n"}, Desc: true},
	}
	tests := []struct {
		name, sel, sort, useIndex string
		want                      string // DDoc of the index; "" the _all_docs scan
		warn, err                 bool
	}{
		{"fewest columns", `{"a":1}`, `[]`, ``, "_design/b", false, false},
		{"leading columns cover more", `{"a":1,"b":2}`, `[]`, ``, "_design/a", false, false},
		{"no required field", `{"x":1}`, `[]`, ``, "", false, false},
		{"partial only when named", `{"a":1}`, `[]`, `["c"]`, "_design/c", false, false},
		{"named but unusable", `{"x":1}`, `[]`, `"a"`, "", true, false},
		{"sort served", `{"n":{"$gt":0}}`, `[{"n":"desc"}]`, ``, "_design/d", false, false},
		{"sort after a constant column", `{"a":1,"b":{"$gt":0}}`, `["b"]`, ``, "_design/a", false, false},
		{"sort by _id alone", `{"x":1}`, `["_id"]`, ``, "", false, false},
		{"sort no index serves", `{"x":1}`, `["x"]`, ``, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Parse([]byte(tt.sel))
			if err != nil {
				t.Fatal(err)
			}
			var list []any
			json.Unmarshal([]byte(tt.sort), &list)
			sorts, herr := ParseSort(list)
			if herr != nil {
				t.Fatal(herr)
			}
			idx, warning, err := Plan(defs, sel, sorts, ParseUseIndex(json.RawMessage(tt.useIndex)))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			got := ""
			if idx != nil {
				got = idx.DDoc
			}
			if got != tt.want || (warning != "") != tt.warn {
				t.Errorf("index %q warning %q, want %q (warning %v)", got, warning, tt.want, tt.warn)
			}
		})
	}
	if _, err := ParseSort([]any{"a", map[string]any{"b": "desc"}}); err != ErrMixedSort {
		t.Errorf("mixed sort: %v", err)
	}
}
