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
				`{"ddoc":"_design/foo","name":"bar","type":"json","partitioned":false,"def":{"fields":[{"n":"asc"}],"partial_filter_selector":{}}}]}`},
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
			has: []string{`foo, bar was not used because it does not contain a valid index for this query.`, `No matching index found`}},
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
