package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRandomOperationsKeepInvariants applies random edits, deletions,
// replicated branches, local writes and compactions, then checks that the
// counters, the changes feed and _all_docs agree with the documents.
func TestRandomOperationsKeepInvariants(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			s := openTest(t)
			db := createTest(t, s, "d")
			ctx := context.Background()
			if r.IntN(2) == 0 {
				db.SetRevsLimit(ctx, 1+r.IntN(4))
			}
			for range 300 {
				id := fmt.Sprintf("doc%d", r.IntN(12))
				var err error
				switch op := r.IntN(10); {
				case op < 4:
					rev := ""
					if cur, gerr := db.Get(ctx, id, GetOptions{}); gerr == nil && r.IntN(5) > 0 {
						rev = cur.Rev
					}
					_, err = db.Put(ctx, &Doc{ID: id, Rev: rev, Body: []byte(fmt.Sprintf(`{"n":%d}`, r.IntN(100)))}, true)
				case op < 6:
					if cur, gerr := db.Get(ctx, id, GetOptions{}); gerr == nil {
						_, err = db.Delete(ctx, id, cur.Rev)
					}
				case op < 8:
					gen := 1 + r.IntN(6)
					ids := make([]string, gen)
					for i := range ids {
						ids[i] = fmt.Sprintf("h%d", r.IntN(3))
					}
					_, err = db.Put(ctx, &Doc{ID: id, Deleted: r.IntN(4) == 0, Body: []byte(`{}`),
						Revisions: &Revisions{Start: gen, IDs: ids[:1+r.IntN(gen)]}}, false)
				case op < 9:
					_, err = db.Put(ctx, &Doc{ID: "_local/" + id, Body: []byte(`{}`)}, false)
				default:
					err = db.Compact(ctx)
				}
				if err != nil && !isErr(err, ErrConflict) {
					t.Fatalf("op: %v", err)
				}
			}
			info, _ := db.Info(ctx)
			live, dead := 0, 0
			seqOf := map[string]uint64{}
			var lastSeq uint64
			db.Changes(ctx, ChangesOptions{}, func(c Change) error {
				if _, dup := seqOf[c.ID]; dup {
					t.Errorf("%s listed twice in changes", c.ID)
				}
				if c.Seq <= lastSeq {
					t.Errorf("changes out of order")
				}
				lastSeq = c.Seq
				seqOf[c.ID] = c.Seq
				if c.Deleted {
					dead++
				} else {
					live++
				}
				d, err := db.OpenRevs(ctx, c.ID, nil, GetOptions{})
				if err != nil || len(d) != len(c.Revs) {
					t.Errorf("%s: open_revs=all %d leaves, changes %d (%v)", c.ID, len(d), len(c.Revs), err)
				}
				for _, or := range d {
					if or.Doc == nil {
						t.Errorf("%s: leaf %s without body", c.ID, or.Missing)
					} else if or.Doc.Seq != c.Seq {
						t.Errorf("%s: doc seq %d, changes seq %d", c.ID, or.Doc.Seq, c.Seq)
					}
				}
				return nil
			})
			rows := 0
			db.AllDocs(ctx, AllDocsOptions{}, func(AllDocsRow) error { rows++; return nil })
			if uint64(live) != info.DocCount || uint64(dead) != info.DocDelCount || rows != live || lastSeq != info.UpdateSeq {
				t.Fatalf("counters: info %+v; changes live %d dead %d last %d; all_docs %d", info, live, dead, lastSeq, rows)
			}
		})
	}
}
