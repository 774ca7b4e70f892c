package couchapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestMangoIndexes: json indexes are created, listed and deleted as
// CouchDB does, stored in design docs, and _find uses them: it reads only
// the docs in the index's range, sorts by them, follows the index as
// documents change, and refuses a sort no index serves.
func TestMangoIndexes(t *testing.T) {
	ts, _ := newTestServer(t)
	steps := []step{{name: "db", method: "PUT", path: "/db", status: 201}}
	for i := 0; i < 20; i++ {
		steps = append(steps, step{name: "doc", method: "PUT", path: fmt.Sprintf("/db/d%02d", i), body: fmt.Sprintf(`{"n":%d,"k":"%c"}`, 20-i, 'a'+rune(i%3)), status: 201})
	}
	steps = append(steps, []step{
		{name: "no doc without n", method: "PUT", path: "/db/other", body: `{"k":"a"}`, status: 201},
		{name: "create", method: "POST", path: "/db/_index", body: `{"index":{"fields":["n"]},"ddoc":"foo","name":"bar"}`, status: 200,
			want: `{"result":"created","id":"_design/foo","name":"bar"}`},
		{name: "again", method: "POST", path: "/db/_index", body: `{"index":{"fields":["n"]},"ddoc":"foo","name":"bar"}`, status: 200,
			want: `{"result":"exists","id":"_design/foo","name":"bar"}`},
		{name: "stored as CouchDB does", method: "GET", path: "/db/_design/foo", status: 200,
			has: []string{`"language":"query"`, `"options":{"def":{"fields":["n"]`}},
		{name: "listed", method: "GET", path: "/db/_index", status: 200,
			want: `{"total_rows":2,"indexes":[{"ddoc":null,"name":"_all_docs","type":"special","def":{"fields":[{"_id":"asc"}]}},` +
				`{"ddoc":"_design/foo","name":"bar","type":"json","partitioned":false,"def":{"fields":[{"n":"asc"}]}}]}`},
		{name: "no index", method: "POST", path: "/db/_index", body: `{}`, status: 400, want: `{"error":"missing_required_key","reason":"Missing required key: index"}`},
		{name: "no fields", method: "POST", path: "/db/_index", body: `{"index":{}}`, status: 400, want: `{"error":"missing_required_key","reason":"Missing required key: fields"}`},
		{name: "not an index", method: "POST", path: "/db/_index", body: `{"index":{"oink":true}}`, status: 400},
		{name: "anonymous", method: "POST", path: "/db/_index", body: `{"index":{"fields":["k"]}}`, user: "-", status: 401},
		{name: "explain names it", method: "POST", path: "/db/_explain", body: `{"selector":{"n":{"$gt":15}}}`, status: 200,
			has: []string{`"index":{"ddoc":"_design/foo"`, `"name":"bar"`, `"type":"json"`}},
		{name: "a sort it serves", method: "POST", path: "/db/_find", body: `{"selector":{"n":{"$gte":18}},"sort":[{"n":"desc"}],"fields":["n"]}`, status: 200,
			want: `{"docs":[{"n":20},{"n":19},{"n":18}],"bookmark":"nil"}`},
		{name: "a sort nothing serves", method: "POST", path: "/db/_find", body: `{"selector":{"k":"a"},"sort":["k"]}`, status: 400,
			want: `{"error":"no_usable_index","reason":"No index exists for this sort, try indexing by the sort fields."}`},
		{name: "sort by _id needs no index", method: "POST", path: "/db/_find", body: `{"selector":{"k":"b"},"sort":["_id"],"fields":["_id"],"limit":2}`, status: 200,
			want: `{"docs":[{"_id":"d01"},{"_id":"d04"}],"bookmark":"nil","warning":"No matching index found, create an index to optimize query time."}`},
		{name: "use_index it cannot serve", method: "POST", path: "/db/_find", body: `{"selector":{"k":"c"},"use_index":["foo","bar"],"fields":["_id"],"limit":1}`, status: 200,
			has: []string{`_design/foo, bar was not used because it is not a valid index for this query.`, `No matching index found`}},
	}...)
	runSteps(t, ts.URL, steps)

	// The index reads only its range, and follows changes.
	find := func(sel string) (ids []string, keys, docs float64) {
		t.Helper()
		_, b := step{method: "POST", path: "/db/_find", body: `{"selector":` + sel + `,"fields":["_id"],"execution_stats":true}`}.do(t, ts.URL)
		var res struct {
			Docs []struct {
				ID string `json:"_id"`
			} `json:"docs"`
			Stats map[string]float64 `json:"execution_stats"`
			Warn  string             `json:"warning"`
		}
		if err := json.Unmarshal(b, &res); err != nil || res.Warn != "" {
			t.Fatalf("find %s: %s", sel, b)
		}
		for _, d := range res.Docs {
			ids = append(ids, d.ID)
		}
		return ids, res.Stats["total_keys_examined"], res.Stats["total_docs_examined"]
	}
	ids, keys, docs := find(`{"n":{"$gt":17}}`)
	if strings.Join(ids, ",") != "d02,d01,d00" || keys != 3 || docs != 3 {
		t.Errorf("range scan: %v, %v keys, %v docs examined", ids, keys, docs)
	}
	runSteps(t, ts.URL, []step{
		{name: "move d05 into the range", method: "PUT", path: "/db/d05?rev=" + revOf(t, ts.URL, "/db/d05"), body: `{"n":100}`, status: 201},
		{name: "drop d00", method: "DELETE", path: "/db/d00?rev=" + revOf(t, ts.URL, "/db/d00"), status: 200},
	})
	if ids, _, _ := find(`{"n":{"$gt":17}}`); strings.Join(ids, ",") != "d02,d01,d05" {
		t.Errorf("after changes: %v", ids)
	}
	runSteps(t, ts.URL, []step{
		{name: "delete the index", method: "DELETE", path: "/db/_index/foo/json/bar", status: 200, want: `{"ok":true}`},
		{name: "gone", method: "DELETE", path: "/db/_index/foo/json/bar", status: 404, want: `{"error":"not_found","reason":"Index not found"}`},
		{name: "its design doc too", method: "GET", path: "/db/_design/foo", status: 404},
		{name: "scans again", method: "POST", path: "/db/_find", body: `{"selector":{"n":{"$gt":17}}}`, status: 200, has: []string{`"warning":"No matching index found`}},
	})
}

// revOf returns a doc's current rev.
func revOf(t *testing.T, base, path string) string {
	t.Helper()
	_, b := step{method: "GET", path: path}.do(t, base)
	var d struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal(b, &d)
	return d.Rev
}

// TestMangoIndexChoice: _find picks the index CouchDB 3.5.0 picks (its
// _explain was read for each of these) and answers as it does.
func TestMangoIndexChoice(t *testing.T) {
	ts, _ := newTestServer(t)
	steps := []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a","name":"Link","age":22,"a":{"b":1}},{"_id":"b","name":"Mary","age":40}]}`, status: 201},
	}
	for _, ix := range []string{
		`{"index":{"fields":["name"]},"ddoc":"n","name":"name-index"}`,
		`{"index":{"fields":["age"]},"ddoc":"ag","name":"age-index"}`,
		`{"index":{"fields":["name","age"]},"ddoc":"na","name":"name-age"}`,
		`{"index":{"fields":["age"],"partial_filter_selector":{"age":{"$gt":30}}},"ddoc":"partial","name":"p"}`,
		`{"index":{"fields":["a.b"]},"ddoc":"ab","name":"ab"}`,
	} {
		steps = append(steps, step{name: "index", method: "POST", path: "/db/_index", body: ix, status: 200})
	}
	runSteps(t, ts.URL, steps)
	tests := []struct {
		name, query, index, ids string
	}{
		{"$in makes a column required", `{"selector":{"name":{"$in":["James","Link"]},"age":{"$gt":21}}}`, "age-index", "a"},
		{"$regex too, with the sort", `{"selector":{"name":{"$regex":"^L"}},"sort":["name"]}`, "name-index", "a"},
		{"partial index not chosen", `{"selector":{"age":{"$gt":1}}}`, "age-index", "a,b"},
		{"partial index named by ddoc", `{"selector":{"age":{"$gt":1}},"use_index":"partial"}`, "p", "b"},
		{"partial index named by ddoc and name", `{"selector":{"age":{"$gt":1}},"use_index":["partial","p"]}`, "p", "b"},
		{"longest prefix of indexable fields", `{"selector":{"name":"Link","age":{"$gt":1}}}`, "name-age", "a"},
		{"sort after a constant column", `{"selector":{"name":"Link"},"sort":["age"]}`, "name-age", "a"},
		{"no sort after a ranged column", `{"selector":{"name":{"$gt":"A"}},"sort":["age"]}`, "age-index", "a,b"},
		{"a field every $or branch requires", `{"selector":{"$or":[{"name":"Link"},{"name":"Mary"}]}}`, "name-index", "a,b"},
		{"a field one $or branch requires", `{"selector":{"$or":[{"name":"Link"},{"age":40}]}}`, "_all_docs", "a,b"},
		{"$exists false requires nothing", `{"selector":{"name":{"$exists":false}}}`, "_all_docs", ""},
		{"nested object is a dotted field", `{"selector":{"a":{"b":1}}}`, "ab", "a"},
		{"sort of the index's field", `{"selector":{"age":{"$gt":0}},"sort":["age"]}`, "age-index", "a,b"},
		{"descending two-field sort", `{"selector":{"name":{"$gt":null},"age":{"$gt":0}},"sort":[{"name":"desc"},{"age":"desc"}]}`, "name-age", "b,a"},
		{"sort by _id", `{"selector":{"_id":{"$gt":null}},"sort":["_id"]}`, "_all_docs", "a,b"},
		{"a sort field need not be in the selector", `{"selector":{"age":{"$gt":0}},"sort":["name"]}`, "name-index", "a,b"},
		{"$beginsWith", `{"selector":{"name":{"$beginsWith":"Li"}}}`, "name-index", "a"},
		{"$exists true", `{"selector":{"age":{"$exists":true}}}`, "age-index", "a,b"},
		{"$ne requires the field", `{"selector":{"name":{"$ne":"x"}}}`, "name-index", "a,b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, b := step{method: "POST", path: "/db/_explain", body: tt.query}.do(t, ts.URL)
			var plan struct {
				Index struct {
					Name string `json:"name"`
				} `json:"index"`
			}
			if err := json.Unmarshal(b, &plan); err != nil || plan.Index.Name != tt.index {
				t.Errorf("_explain: index %q, want %q: %s", plan.Index.Name, tt.index, b)
			}
			if ids, b := findIDs(t, ts.URL, "/db", tt.query); ids != tt.ids {
				t.Errorf("_find: %s, want %s: %s", ids, tt.ids, b)
			}
		})
	}
}

// TestMangoIndexDefinitions: index definitions are taken, refused and
// named as CouchDB 3.5.0 does.
func TestMangoIndexDefinitions(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: "/db", status: 201}})
	mixed := `{"error":"unsupported_mixed_sort","reason":"Sorts currently only support a single direction for all fields."}`
	tests := []step{
		{name: "mixed directions", method: "POST", path: "/db/_index", body: `{"index":{"fields":[{"foo":"desc"},"bar"]},"name":"x"}`, status: 400, want: mixed},
		{name: "mixed directions, both explicit", method: "POST", path: "/db/_index", body: `{"index":{"fields":[{"foo":"asc"},{"bar":"desc"}]},"name":"z"}`, status: 400, want: mixed},
		{name: "bad direction", method: "POST", path: "/db/_index", body: `{"index":{"fields":[{"foo":"up"}]},"name":"v"}`, status: 400, has: []string{`"error":"invalid_sort_field"`}},
		{name: "two fields in one object", method: "POST", path: "/db/_index", body: `{"index":{"fields":[{"foo":"asc","bar":"asc"}]},"name":"u"}`, status: 400, has: []string{`"error":"invalid_sort_field"`}},
		{name: "not a name", method: "POST", path: "/db/_index", body: `{"index":{"fields":[1]},"name":"r"}`, status: 400, has: []string{`"error":"invalid_sort_field"`}},
		{name: "descending", method: "POST", path: "/db/_index", body: `{"index":{"fields":[{"foo":"desc"},{"bar":"desc"}]},"ddoc":"d","name":"y"}`, status: 200},
		{name: "listed descending", method: "GET", path: "/db/_index", status: 200, has: []string{`"def":{"fields":[{"foo":"desc"},{"bar":"desc"}]}`}},
		{name: "kept as given", method: "GET", path: "/db/_design/d", status: 200, has: []string{`"options":{"def":{"fields":[{"foo":"desc"},{"bar":"desc"}]}}`, `"map":{"fields":{"foo":"desc","bar":"desc"},"partial_filter_selector":{}}`}},
		{name: "same definition again", method: "POST", path: "/db/_index", body: `{"index":{"fields":[{"foo":"desc"},{"bar":"desc"}]},"ddoc":"d","name":"y"}`, status: 200, has: []string{`"result":"exists"`}},
		{name: "partial", method: "POST", path: "/db/_index", body: `{"index":{"fields":["type"],"partial_filter_selector":{"type":"x","a":{"b":1}}},"ddoc":"pp","name":"px"}`, status: 200},
		{name: "partial normalized in the map, as given in options", method: "GET", path: "/db/_design/pp", status: 200,
			has: []string{`"map":{"fields":{"type":"asc"},"partial_filter_selector":{"$and":[{"type":{"$eq":"x"}},{"a.b":{"$eq":1}}]}}`,
				`"options":{"def":{"fields":["type"],"partial_filter_selector":{"type":"x","a":{"b":1}}}}`}},
		{name: "partial listed normalized", method: "GET", path: "/db/_index", status: 200,
			has: []string{`"def":{"fields":[{"type":"asc"}],"partial_filter_selector":{"$and":[{"type":{"$eq":"x"}},{"a.b":{"$eq":1}}]}}`}},
		{name: "sorts in two directions", method: "POST", path: "/db/_find", body: `{"selector":{"foo":{"$gt":null}},"sort":[{"foo":"desc"},{"bar":"asc"}]}`, status: 400, want: mixed},
	}
	runSteps(t, ts.URL, tests)
	// Two indexes of the same fields under two names get two design docs.
	ddocs := map[string]bool{}
	for _, name := range []string{"foo-index", "bar-index", "foo-index"} {
		_, b := step{method: "POST", path: "/db/_index", body: `{"index":{"fields":["foo"]},"name":"` + name + `"}`}.do(t, ts.URL)
		var res struct{ ID, Name string }
		if err := json.Unmarshal(b, &res); err != nil || res.Name != name || !strings.HasPrefix(res.ID, "_design/") {
			t.Fatalf("%s: %s", name, b)
		}
		ddocs[res.ID] = true
	}
	if len(ddocs) != 2 {
		t.Errorf("design docs %v: want one for each name", ddocs)
	}
}

// TestFindFieldsAsCouchDB: _id conditions compare as CouchDB's (Erlang
// term order), and field names take backslash escapes in selectors,
// fields and sorts.
func TestFindFieldsAsCouchDB(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a","$foo":"x","e":{"d.f":1}},{"_id":"b","x":"b"},{"_id":"c"}]}`, status: 201},
	})
	tests := []struct{ name, query, ids string }{
		{"_id $gt {}", `{"selector":{"_id":{"$gt":{}}}}`, "a,b,c"},
		{"_id $lt {}", `{"selector":{"_id":{"$lt":{}}}}`, ""},
		{"_id $lte []", `{"selector":{"_id":{"$lte":[]}}}`, ""},
		{"_id $gt [] sorted desc", `{"selector":{"_id":{"$gt":[]}},"sort":[{"_id":"desc"}]}`, "c,b,a"},
		{"_id $gt 10", `{"selector":{"_id":{"$gt":10}}}`, "a,b,c"},
		{"_id in a range closed by {}", `{"selector":{"_id":{"$gt":"a","$lt":{}}}}`, ""},
		{"other fields collate: x $lt {}", `{"selector":{"x":{"$lt":{}}}}`, "b"},
		{"escaped initial dollar", `{"selector":{"\\$foo":"x"}}`, "a"},
		{"escaped dot", `{"selector":{"e.d\\.f":1}}`, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ids, b := findIDs(t, ts.URL, "/db", tt.query); ids != tt.ids {
				t.Errorf("%s, want %s: %s", ids, tt.ids, b)
			}
		})
	}
	runSteps(t, ts.URL, []step{
		{name: "escaped field picked", method: "POST", path: "/db/_find", body: `{"selector":{"_id":"a"},"fields":["e.d\\.f"]}`, status: 200,
			has: []string{`"docs":[{"e":{"d.f":1}}]`}},
	})
}

// findIDs runs the _find body on db and returns the ids of the docs it
// answers, comma-separated, and the answer.
func findIDs(t *testing.T, base, db, body string) (string, []byte) {
	t.Helper()
	_, b := step{method: "POST", path: db + "/_find", body: body}.do(t, base)
	var res struct {
		Docs []struct {
			ID string `json:"_id"`
		} `json:"docs"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("_find %s: %s", body, b)
	}
	ids := make([]string, len(res.Docs))
	for i, d := range res.Docs {
		ids[i] = d.ID
	}
	return strings.Join(ids, ","), b
}
