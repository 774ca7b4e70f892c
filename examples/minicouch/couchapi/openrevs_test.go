package couchapi

import (
	"net/url"
	"testing"
)

// TestRevisionReadsAsCouchDB: reads of given revisions answer as CouchDB
// 3.5.0 does (the answers below are its): open_revs and _bulk_get list
// the revisions found once each in ascending order, then the missing
// ones, whatever the request's order, also with latest; such reads, and
// one with rev=, carry no metadata about other revisions; rev= with
// latest=true reads the winner.
func TestRevisionReadsAsCouchDB(t *testing.T) {
	ts, _ := newTestServer(t)
	json := map[string]string{"Accept": "application/json"}
	openRevs := func(revs string) string { return "/db/c?open_revs=" + url.QueryEscape(revs) }
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "leaves 1-bbb, 2-ccc, 2-ddd", method: "POST", path: "/db/_bulk_docs", status: 201,
			body: `{"new_edits":false,"docs":[{"_id":"c","_rev":"1-aaa"},{"_id":"c","_rev":"1-bbb"},{"_id":"c","_rev":"2-ccc","_revisions":{"start":2,"ids":["ccc","aaa"]}},{"_id":"c","_rev":"2-ddd","_revisions":{"start":2,"ids":["ddd","aaa"]}}]}`},
		{name: "latest: leaves ascending", method: "GET", path: openRevs(`["1-aaa"]`) + "&latest=true", headers: json, status: 200,
			want: `[{"ok":{"_id":"c","_rev":"2-ccc"}},{"ok":{"_id":"c","_rev":"2-ddd"}}]`},
		{name: "latest: each leaf once", method: "GET", path: openRevs(`["1-aaa","2-ccc"]`) + "&latest=true", headers: json, status: 200,
			want: `[{"ok":{"_id":"c","_rev":"2-ccc"}},{"ok":{"_id":"c","_rev":"2-ddd"}}]`},
		{name: "a list: ascending, missing last", method: "GET", path: openRevs(`["9-zzz","2-ddd","1-bbb","2-ccc"]`), headers: json, status: 200,
			want: `[{"ok":{"_id":"c","_rev":"1-bbb"}},{"ok":{"_id":"c","_rev":"2-ccc"}},{"ok":{"_id":"c","_rev":"2-ddd"}},{"missing":"9-zzz"}]`},
		{name: "_bulk_get latest", method: "POST", path: "/db/_bulk_get?latest=true", body: `{"docs":[{"id":"c","rev":"1-aaa"}]}`, status: 200,
			want: `{"results":[{"id":"c","docs":[{"ok":{"_id":"c","_rev":"2-ccc"}},{"ok":{"_id":"c","_rev":"2-ddd"}}]}]}`},
		{name: "no metadata in open_revs", method: "GET", path: "/db/c?open_revs=all&revs_info=true&conflicts=true&local_seq=true&revs=true", headers: json, status: 200,
			want: `[{"ok":{"_id":"c","_rev":"1-bbb","_revisions":{"start":1,"ids":["bbb"]}}},{"ok":{"_id":"c","_rev":"2-ccc","_revisions":{"start":2,"ids":["ccc","aaa"]}}},{"ok":{"_id":"c","_rev":"2-ddd","_revisions":{"start":2,"ids":["ddd","aaa"]}}}]`},
		{name: "no metadata in _bulk_get", method: "POST", path: "/db/_bulk_get?revs_info=true&conflicts=true&local_seq=true", body: `{"docs":[{"id":"c","rev":"1-bbb"}]}`, status: 200,
			want: `{"results":[{"id":"c","docs":[{"ok":{"_id":"c","_rev":"1-bbb"}}]}]}`},
		{name: "no metadata at a rev", method: "GET", path: "/db/c?rev=2-ccc&conflicts=true&revs_info=true&local_seq=true&revs=true", status: 200,
			want: `{"_id":"c","_rev":"2-ccc","_revisions":{"start":2,"ids":["ccc","aaa"]}}`},
		{name: "metadata of the winner", method: "GET", path: "/db/c?conflicts=true", status: 200,
			want: `{"_id":"c","_rev":"2-ddd","_conflicts":["2-ccc","1-bbb"]}`},
		{name: "rev with latest reads the winner", method: "GET", path: "/db/c?rev=1-bbb&latest=true", status: 200,
			want: `{"_id":"c","_rev":"2-ddd"}`},
	})
}
