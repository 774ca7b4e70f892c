package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

func collectChanges(t *testing.T, db *DB, opts ChangesOptions) ([]string, ChangesResult) {
	t.Helper()
	var rows []string
	res, err := db.Changes(context.Background(), opts, func(c Change) error {
		s := fmt.Sprintf("%d:%s", c.Seq, c.ID)
		if c.Deleted {
			s += "(del)"
		}
		if len(c.Revs) > 1 {
			s += fmt.Sprintf("[%d]", len(c.Revs))
		}
		rows = append(rows, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows, res
}

func TestChanges(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	ra := put(t, db, `{"_id":"a"}`)           // 1
	put(t, db, `{"_id":"b"}`)                 // 2
	put(t, db, `{"_id":"c"}`)                 // 3
	put(t, db, `{"_id":"a","_rev":"`+ra+`"}`) // 4: a moves
	rb, _ := db.Get(ctx, "b", GetOptions{})
	db.Delete(ctx, "b", rb.Rev)                                                   // 5
	putReplicated(t, db, `{"_id":"c","_revisions":{"start":2,"ids":["zz","q"]}}`) // 6: conflict on c
	for _, tc := range []struct {
		name    string
		opts    ChangesOptions
		want    []string
		last    uint64
		pending int64
	}{
		{"all", ChangesOptions{}, []string{"4:a", "5:b(del)", "6:c[2]"}, 6, 0},
		{"since", ChangesOptions{Since: 4}, []string{"5:b(del)", "6:c[2]"}, 6, 0},
		{"limit", ChangesOptions{Limit: 1}, []string{"4:a"}, 4, 2},
		{"since now", ChangesOptions{Since: 6}, nil, 6, 0},
		{"descending", ChangesOptions{Descending: true}, []string{"6:c[2]", "5:b(del)", "4:a"}, 4, 0},
		{"descending limit", ChangesOptions{Descending: true, Limit: 2}, []string{"6:c[2]", "5:b(del)"}, 5, 0},
		{"descending since", ChangesOptions{Descending: true, Since: 5}, []string{"4:a"}, 4, 0},
	} {
		rows, res := collectChanges(t, db, tc.opts)
		if !slices.Equal(rows, tc.want) || res.LastSeq != tc.last || res.Pending != tc.pending {
			t.Errorf("%s: %v %+v, want %v last %d pending %d", tc.name, rows, res, tc.want, tc.last, tc.pending)
		}
	}
	for _, tc := range []struct {
		name          string
		opts          ChangesOptions
		stopAt        uint64
		last, pending int64
	}{
		{"stop at first", ChangesOptions{}, 4, 4, 2},
		{"stop at last", ChangesOptions{}, 6, 6, 0},
		{"stop descending", ChangesOptions{Descending: true}, 5, 5, 0},
	} {
		var first []string
		res, err := db.Changes(ctx, tc.opts, func(c Change) error {
			if first == nil {
				first = c.Revs
			}
			if c.Seq == tc.stopAt {
				return ErrStop
			}
			return nil
		})
		if err != nil || len(first) == 0 || res.LastSeq != uint64(tc.last) || res.Pending != tc.pending {
			t.Errorf("%s: first %v, %+v, %v; want last %d pending %d (the stopping row counts)", tc.name, first, res, err, tc.last, tc.pending)
		}
	}
	var first []string
	db.Changes(ctx, ChangesOptions{}, func(c Change) error {
		first = c.Revs
		return ErrStop
	})
	if len(first) != 1 {
		t.Fatalf("ErrStop: %v", first)
	}
	var crevs []string
	db.Changes(ctx, ChangesOptions{Since: 5}, func(c Change) error { crevs = c.Revs; return nil })
	if len(crevs) != 2 || crevs[0] != "2-zz" {
		t.Fatalf("leaf revs winner first: %v", crevs)
	}
}

func TestChangesManyBatches(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	const n = 2*changesBatch + 17
	docs := make([]*Doc, n)
	for i := range docs {
		docs[i] = &Doc{ID: fmt.Sprintf("d%05d", i), Body: []byte(`{}`)}
	}
	if _, err := db.BulkDocs(ctx, docs, true); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	res, err := db.Changes(ctx, ChangesOptions{Since: 5, Limit: changesBatch + 3}, func(c Change) error {
		seqs = append(seqs, c.Seq)
		return nil
	})
	if err != nil || len(seqs) != changesBatch+3 || seqs[0] != 6 || res.Pending != int64(n-5-changesBatch-3) {
		t.Fatalf("batched changes: %d rows, first %v, %+v %v", len(seqs), seqs[:1], res, err)
	}
	count := 0
	all, _ := db.AllDocs(ctx, AllDocsOptions{}, func(AllDocsRow) error { count++; return nil })
	if count != n || all.TotalRows != n {
		t.Fatalf("all_docs over batches: %d rows, %+v", count, all)
	}
}

func TestWait(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan uint64, 1)
	go func() {
		seq, _ := db.Wait(ctx, 0)
		got <- seq
	}()
	put(t, db, `{"_id":"a"}`)
	if seq := <-got; seq != 1 {
		t.Fatalf("Wait returned %d", seq)
	}
	short, c2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer c2()
	if _, err := db.Wait(short, 1); err == nil {
		t.Fatal("Wait without change returned no error")
	}
	errc := make(chan error, 1)
	go func() {
		_, err := db.Wait(ctx, 1)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // usually waiting by then; a Wait that starts after the delete fails alike
	s.DeleteDB("d")
	if err := <-errc; !isErr(err, ErrDBNotFound) {
		t.Fatalf("Wait on deleted db: %v", err)
	}
}

func sp(s string) *string { return &s }

func TestAllDocs(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	revs := map[string]string{}
	for _, id := range []string{"a", "b", "c", "d", "e", "_design/x"} {
		revs[id] = put(t, db, `{"_id":"`+id+`"}`)
	}
	db.Delete(ctx, "c", revs["c"])
	put(t, db, `{"_id":"_local/z"}`)
	for _, tc := range []struct {
		name   string
		opts   AllDocsOptions
		want   []string
		offset uint64
	}{
		{"all", AllDocsOptions{}, []string{"_design/x", "a", "b", "d", "e"}, 0},
		{"range", AllDocsOptions{StartKey: sp("b"), EndKey: sp("d")}, []string{"b", "d"}, 2},
		{"exclusive end", AllDocsOptions{StartKey: sp("b"), EndKey: sp("d"), ExclusiveEnd: true}, []string{"b"}, 2},
		{"descending", AllDocsOptions{Descending: true, StartKey: sp("d"), EndKey: sp("b")}, []string{"d", "b"}, 1},
		{"descending from missing key", AllDocsOptions{Descending: true, StartKey: sp("c")}, []string{"b", "a", "_design/x"}, 2},
		{"descending past the end", AllDocsOptions{Descending: true, StartKey: sp("zzz"), Limit: 1}, []string{"e"}, 0},
		{"skip limit", AllDocsOptions{Skip: 1, Limit: 2}, []string{"a", "b"}, 1},
		{"start past end", AllDocsOptions{StartKey: sp("f")}, nil, 5},
		{"keys", AllDocsOptions{Keys: []string{"e", "c", "nope", "a"}}, []string{"e", "c(del)", "nope(missing)", "a"}, 0},
	} {
		var rows []string
		var startRes *AllDocsResult
		tc.opts.Start = func(r AllDocsResult) {
			if startRes != nil || rows != nil {
				t.Errorf("%s: Start called twice or after rows", tc.name)
			}
			startRes = &r
		}
		res, err := db.AllDocs(ctx, tc.opts, func(r AllDocsRow) error {
			s := r.ID
			switch {
			case r.Missing:
				s += "(missing)"
			case r.Deleted:
				s += "(del)"
			}
			if !r.Missing && r.Rev == "" {
				t.Errorf("%s: row %s without rev", tc.name, r.ID)
			}
			rows = append(rows, s)
			return nil
		})
		if startRes == nil || *startRes != res {
			t.Errorf("%s: Start got %v, result %v", tc.name, startRes, res)
		}
		if err != nil || !slices.Equal(rows, tc.want) || res.Offset != tc.offset || res.TotalRows != 5 {
			t.Errorf("%s: %v %+v %v, want %v offset %d", tc.name, rows, res, err, tc.want, tc.offset)
		}
	}
}
