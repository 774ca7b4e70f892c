package store

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func TestPutConflictRules(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	r1 := put(t, db, `{"_id":"a","v":1}`)
	if !strings.HasPrefix(r1, "1-") || len(r1) != 34 {
		t.Fatalf("rev %q", r1)
	}
	r2 := put(t, db, `{"_id":"a","_rev":"`+r1+`","v":2}`)
	for _, tc := range []struct {
		name string
		doc  string
		err  error
	}{
		{"create existing without rev", `{"_id":"a"}`, ErrConflict},
		{"stale rev", `{"_id":"a","_rev":"` + r1 + `"}`, ErrConflict},
		{"unknown rev", `{"_id":"a","_rev":"2-ffff"}`, ErrConflict},
		{"rev on missing doc", `{"_id":"nope","_rev":"1-abc"}`, ErrConflict},
		{"stub on new doc", `{"_id":"s","_attachments":{"f":{"stub":true}}}`, MissingStub("s", "f")},
	} {
		_, err := db.Put(ctx, mustParse(t, tc.doc), true)
		if !isErr(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
	d, err := db.Get(ctx, "a", GetOptions{})
	if err != nil || d.Rev != r2 || string(d.Body) != `{"v":2}` {
		t.Fatalf("get: %+v %v", d, err)
	}
	// deterministic revs: the same edit of the same parent in another db
	db2 := createTest(t, s, "d2")
	if r := put(t, db2, `{"_id":"a","v":1}`); r != r1 {
		t.Fatalf("same edit gave %s and %s", r, r1)
	}
	// delete, then recreate
	r3, err := db.Delete(ctx, "a", r2)
	if err != nil || !strings.HasPrefix(r3, "3-") {
		t.Fatalf("delete: %s %v", r3, err)
	}
	if _, err := db.Get(ctx, "a", GetOptions{}); !isErr(err, ErrDeleted) || err.(*Error).Reason != "deleted" {
		t.Fatalf("get deleted: %v", err)
	}
	if _, err := db.Get(ctx, "zz", GetOptions{}); err.(*Error).Reason != "missing" {
		t.Fatalf("get missing: %v", err)
	}
	tomb, err := db.Get(ctx, "a", GetOptions{Rev: r3})
	if err != nil || docJSON(t, tomb) != `{"_id":"a","_rev":"`+r3+`","_deleted":true}` {
		t.Fatalf("get tombstone by rev: %v %v", tomb, err)
	}
	r4 := put(t, db, `{"_id":"a","v":4}`)
	if !strings.HasPrefix(r4, "4-") {
		t.Fatalf("recreate rev %s", r4)
	}
	old, err := db.Get(ctx, "a", GetOptions{Rev: r1, Revs: true})
	if err != nil || old.Revisions.Start != 1 {
		t.Fatalf("old rev: %v %v", old, err)
	}
	info, _ := db.Info(ctx)
	if info.DocCount != 2-1 || info.DocDelCount != 0 {
		t.Fatalf("info %+v", info)
	}
}

// conflicted builds sample 1's documents: r1 with leaves 2-bbb, 2-ccc and
// rx with history 1-x 2-xy 3-xyz.
func conflicted(t *testing.T, db *DB) {
	putReplicated(t, db, `{"_id":"r1","_revisions":{"start":2,"ids":["bbb","bfa4c59c0d5524945486310bb942bb84"]},"branch":"b"}`)
	putReplicated(t, db, `{"_id":"r1","_revisions":{"start":2,"ids":["ccc","bfa4c59c0d5524945486310bb942bb84"]},"branch":"c"}`)
	putReplicated(t, db, `{"_id":"rx","_revisions":{"start":3,"ids":["xyz","xy","x"]},"n":99}`)
	putReplicated(t, db, `{"_id":"rdel","_rev":"1-ddd","_deleted":true}`)
}

func TestRevsDiffSample(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "rp")
	conflicted(t, db)
	got, err := db.RevsDiff(context.Background(), map[string][]string{
		"r1":    {"1-bfa4c59c0d5524945486310bb942bb84", "2-bbb", "3-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "2-zzz"},
		"rx":    {"4-new", "2-xy"},
		"nodoc": {"1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "2-cccccccccccccccccccccccccccccccc"},
		"rdel":  {"1-ddd"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]RevsDiff{
		"nodoc": {Missing: []string{"1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "2-cccccccccccccccccccccccccccccccc"}},
		"rx":    {Missing: []string{"4-new"}, PossibleAncestors: []string{"3-xyz"}},
		"r1":    {Missing: []string{"2-zzz", "3-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}, PossibleAncestors: []string{"2-ccc", "2-bbb"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for id, w := range want {
		g := got[id]
		if !slices.Equal(g.Missing, w.Missing) || !slices.Equal(g.PossibleAncestors, w.PossibleAncestors) {
			t.Errorf("%s: got %+v, want %+v", id, g, w)
		}
	}
}

func TestReadOptions(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "rp")
	ctx := context.Background()
	conflicted(t, db)
	putReplicated(t, db, `{"_id":"r1","_revisions":{"start":3,"ids":["ddd","ccc","bfa4c59c0d5524945486310bb942bb84"]},"_deleted":true}`)
	for _, tc := range []struct {
		name string
		id   string
		opts GetOptions
		want string
		err  error
	}{
		{"winner with conflicts", "r1", GetOptions{Conflicts: true, DeletedConflicts: true},
			`{"_id":"r1","_rev":"2-bbb","branch":"b","_deleted_conflicts":["3-ddd"]}`, nil},
		{"revs", "rx", GetOptions{Revs: true}, `{"_id":"rx","_rev":"3-xyz","n":99,"_revisions":{"start":3,"ids":["xyz","xy","x"]}}`, nil},
		{"revs_info", "rx", GetOptions{RevsInfo: true},
			`{"_id":"rx","_rev":"3-xyz","n":99,"_revs_info":[{"rev":"3-xyz","status":"available"},{"rev":"2-xy","status":"missing"},{"rev":"1-x","status":"missing"}]}`, nil},
		{"local_seq", "rx", GetOptions{LocalSeq: true}, `{"_id":"rx","_rev":"3-xyz","n":99,"_local_seq":3}`, nil},
		{"deleted rev", "r1", GetOptions{Rev: "3-ddd"}, `{"_id":"r1","_rev":"3-ddd","_deleted":true}`, nil},
		{"latest", "r1", GetOptions{Rev: "2-ccc", Latest: true}, `{"_id":"r1","_rev":"3-ddd","_deleted":true}`, nil},
		{"interior rev without body", "rx", GetOptions{Rev: "2-xy"}, "", ErrNotFound},
		{"unknown rev", "rx", GetOptions{Rev: "9-q"}, "", ErrNotFound},
		{"bad rev", "rx", GetOptions{Rev: "q"}, "", BadRequest("")},
		{"deleted doc", "rdel", GetOptions{}, "", ErrDeleted},
	} {
		d, err := db.Get(ctx, tc.id, tc.opts)
		if tc.err != nil {
			if !isErr(err, tc.err) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := docJSON(t, d); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	all, err := db.OpenRevs(ctx, "r1", nil, GetOptions{})
	if err != nil || len(all) != 2 || all[0].Doc.Rev != "2-bbb" || all[1].Doc.Rev != "3-ddd" || !all[1].Doc.Deleted {
		t.Fatalf("open_revs=all: %+v %v", all, err)
	}
	// As CouchDB: the revisions found in ascending order, then the missing ones.
	list, err := db.OpenRevs(ctx, "r1", []string{"2-ccc", "9-x", "2-bbb"}, GetOptions{Latest: true})
	if err != nil || len(list) != 3 || list[0].Doc.Rev != "2-bbb" || list[1].Doc.Rev != "3-ddd" || list[2].Missing != "9-x" {
		t.Fatalf("open_revs list: %+v %v", list, err)
	}
	if _, err := db.OpenRevs(ctx, "nodoc", nil, GetOptions{}); !isErr(err, ErrNotFound) {
		t.Fatalf("open_revs=all missing doc: %v", err)
	}
	if l, _ := db.OpenRevs(ctx, "nodoc", []string{"1-a"}, GetOptions{}); len(l) != 1 || l[0].Missing != "1-a" {
		t.Fatalf("open_revs list missing doc: %+v", l)
	}
}

func TestReplicatedWrites(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	conflicted(t, db)
	seq := db.UpdateSeq()
	// an already stored revision is left alone: no new seq
	putReplicated(t, db, `{"_id":"rx","_revisions":{"start":3,"ids":["xyz","xy","x"]},"n":1000}`)
	if db.UpdateSeq() != seq {
		t.Fatal("re-storing a known revision bumped the seq")
	}
	d, _ := db.Get(ctx, "rx", GetOptions{})
	if string(d.Body) != `{"n":99}` {
		t.Fatalf("known revision overwritten: %s", d.Body)
	}
	// extending a path with a longer history links to the existing tree
	putReplicated(t, db, `{"_id":"rx","_revisions":{"start":4,"ids":["w","xyz","xy","x"]},"n":4}`)
	d, _ = db.Get(ctx, "rx", GetOptions{Revs: true, Conflicts: true})
	if d.Rev != "4-w" || len(d.Conflicts) != 0 || len(d.Revisions.IDs) != 4 {
		t.Fatalf("extended: %s", docJSON(t, d))
	}
	// a new edit on a replicated conflict branch
	r := put(t, db, `{"_id":"r1","_rev":"2-bbb","v":3}`)
	d, _ = db.Get(ctx, "r1", GetOptions{Conflicts: true})
	if d.Rev != r || !slices.Equal(d.Conflicts, []string{"2-ccc"}) {
		t.Fatalf("after edit: %s", docJSON(t, d))
	}
	res, err := db.BulkDocs(ctx, []*Doc{mustParse(t, `{"_id":"q"}`)}, false)
	if err != nil || res[0].Err == nil {
		t.Fatalf("new_edits=false without rev: %+v %v", res, err)
	}
}

func TestRevsLimitStemming(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	if err := db.SetRevsLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	rev := put(t, db, `{"_id":"a","n":0}`)
	first := rev
	for i := 1; i < 6; i++ {
		rev = put(t, db, `{"_id":"a","_rev":"`+rev+`","n":1}`)
	}
	d, err := db.Get(ctx, "a", GetOptions{Revs: true})
	if err != nil || d.Revisions.Start != 6 || len(d.Revisions.IDs) != 3 {
		t.Fatalf("stemmed: %s %v", docJSON(t, d), err)
	}
	if _, err := db.Get(ctx, "a", GetOptions{Rev: first}); !isErr(err, ErrNotFound) {
		t.Fatalf("stemmed rev still readable: %v", err)
	}
	diff, _ := db.RevsDiff(ctx, map[string][]string{"a": {first, rev}})
	if !slices.Equal(diff["a"].Missing, []string{first}) {
		t.Fatalf("revs_diff after stemming: %+v", diff)
	}
}

func TestBulkDocs(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	r := put(t, db, `{"_id":"exists"}`)
	docs := []*Doc{
		mustParse(t, `{"_id":"n1","v":1}`),
		mustParse(t, `{"_id":"exists"}`),
		mustParse(t, `{"v":"no id"}`),
		mustParse(t, `{"_id":"exists","_rev":"`+r+`","v":2}`),
		mustParse(t, `{"_id":"n1","_attachments":{"x":{"stub":true}}}`),
		mustParse(t, `{"_id":"_local/l","v":3}`),
		mustParse(t, `{"_id":"dig","_attachments":{"f":{"data":"aGVsbG8=","digest":"md5-AAAAAAAAAAAAAAAAAAAAAA=="}}}`),
	}
	res, err := db.BulkDocs(ctx, docs, true)
	if err != nil {
		t.Fatal(err)
	}
	wantErr := []error{nil, ErrConflict, nil, nil, ErrConflict, nil, ErrDigestMismatch}
	for i, w := range wantErr {
		if w == nil && (res[i].Err != nil || res[i].Rev == "") || w != nil && !isErr(res[i].Err, w) {
			t.Errorf("doc %d: %+v, want err %v", i, res[i], w)
		}
	}
	if res[0].Seq != 2 || res[3].Seq != 4 || res[1].Seq != 0 || res[5].Seq != 0 {
		t.Errorf("seqs %d %d %d %d", res[0].Seq, res[3].Seq, res[1].Seq, res[5].Seq)
	}
	if len(res[2].ID) != 32 || res[5].Rev != "0-1" {
		t.Errorf("generated id %q local rev %q", res[2].ID, res[5].Rev)
	}
	info, _ := db.Info(ctx)
	if info.DocCount != 3 || info.UpdateSeq != 4 {
		t.Fatalf("info %+v", info)
	}
}

func TestLocalDocs(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	for _, tc := range []struct {
		doc  string
		rev  string
		err  error
		edit bool
	}{
		// CouchDB 3: no conflict check; the new rev is the given one + 1.
		{`{"_id":"_local/a","v":1}`, "0-1", nil, true},
		{`{"_id":"_local/a","v":2}`, "0-1", nil, true},
		{`{"_id":"_local/a","_rev":"0-1","v":2}`, "0-2", nil, true},
		{`{"_id":"_local/a","_rev":"0-7","v":3}`, "0-8", nil, false},
		{`{"_id":"_local/a","_rev":"0-x","v":3}`, "", BadRequest("Invalid rev format"), true},
		{`{"_id":"_local/a","_rev":"0-1","_deleted":true}`, "0-0", nil, true},
		{`{"_id":"_local/gone","_deleted":true}`, "0-0", nil, true},
		{`{"_id":"_local/b"}`, "0-1", nil, true},
	} {
		rev, err := db.Put(ctx, mustParse(t, tc.doc), tc.edit)
		if !isErr(err, tc.err) || (tc.err == nil && rev != tc.rev) {
			t.Errorf("%s: %q %v, want %q %v", tc.doc, rev, err, tc.rev, tc.err)
		}
	}
	if _, err := db.Get(ctx, "_local/a", GetOptions{}); !isErr(err, ErrNotFound) {
		t.Fatalf("deleted local doc readable: %v", err)
	}
	if db.UpdateSeq() != 0 {
		t.Fatalf("local docs moved update_seq to %d", db.UpdateSeq())
	}
	var ids []string
	res, err := db.LocalDocs(ctx, AllDocsOptions{}, func(r AllDocsRow) error { ids = append(ids, r.ID+"@"+r.Rev); return nil })
	if err != nil || !slices.Equal(ids, []string{"_local/b@0-1"}) || res.TotalRows != 1 {
		t.Fatalf("LocalDocs = %v %+v %v", ids, res, err)
	}
	n := 0
	db.Changes(ctx, ChangesOptions{}, func(Change) error { n++; return nil })
	db.AllDocs(ctx, AllDocsOptions{}, func(AllDocsRow) error { n++; return nil })
	if n != 0 {
		t.Fatalf("local docs in changes/all_docs")
	}
}
