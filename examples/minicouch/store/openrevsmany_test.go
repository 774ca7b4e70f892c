package store

import (
	"context"
	"reflect"
	"testing"
)

// TestOpenRevsMany checks that reading many docs in one transaction answers
// exactly what OpenRevs answers for each.
func TestOpenRevsMany(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "many")
	putReplicated(t, db, `{"_id":"r1","_revisions":{"start":2,"ids":["bbb","aaa"]},"v":1}`)
	putReplicated(t, db, `{"_id":"r1","_revisions":{"start":2,"ids":["ccc","aaa"]},"v":2}`)
	rev := put(t, db, `{"_id":"plain","v":3}`)
	reqs := []OpenRevsRequest{
		{ID: "r1"},
		{ID: "r1", Revs: []string{"1-aaa"}, Opts: GetOptions{Latest: true, Revs: true}},
		{ID: "r1", Revs: []string{"2-ccc", "9-x"}},
		{ID: "plain", Revs: []string{rev}, Opts: GetOptions{Revs: true}},
		{ID: "nodoc"},
		{ID: "nodoc", Revs: []string{"1-a"}},
	}
	ctx := context.Background()
	got := db.OpenRevsMany(ctx, reqs)
	if len(got) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(got), len(reqs))
	}
	for i, r := range reqs {
		want, werr := db.OpenRevs(ctx, r.ID, r.Revs, r.Opts)
		if !isErr(got[i].Err, werr) && got[i].Err != werr {
			t.Errorf("request %d: error %v, OpenRevs %v", i, got[i].Err, werr)
		}
		if len(got[i].Revs) != len(want) {
			t.Fatalf("request %d: %d revs, OpenRevs %d", i, len(got[i].Revs), len(want))
		}
		for j := range want {
			if got[i].Revs[j].Missing != want[j].Missing ||
				(want[j].Doc == nil) != (got[i].Revs[j].Doc == nil) ||
				want[j].Doc != nil && !reflect.DeepEqual(docJSON(t, got[i].Revs[j].Doc), docJSON(t, want[j].Doc)) {
				t.Errorf("request %d rev %d: %+v, OpenRevs %+v", i, j, got[i].Revs[j], want[j])
			}
		}
	}
	if got[4].Err == nil || got[5].Revs[0].Missing != "1-a" || len(got[1].Revs) != 2 {
		t.Errorf("unexpected answers: %+v", got)
	}
}
