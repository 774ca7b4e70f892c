package store

import (
	"context"

	"github.com/couchepi/couchepi/examples/minicouch/revtree"
	bolt "go.etcd.io/bbolt"
)

// RevsDiff answers _revs_diff: for each document id, the given revs the
// database does not have (sorted ascending) and the possible ancestors
// among its leaves. Documents with nothing missing are left out.
func (db *DB) RevsDiff(ctx context.Context, req map[string][]string) (map[string]RevsDiff, error) {
	out := make(map[string]RevsDiff)
	err := db.view(func(b *bolt.Bucket) error {
		docs := b.Bucket(bucketDocs)
		for id, revStrs := range req {
			rec, err := loadRecord(docs, id)
			if err != nil {
				return err
			}
			var parsed []revtree.Rev
			var bad []string
			for _, s := range revStrs {
				if r, err := revtree.ParseRev(s); err == nil {
					parsed = append(parsed, r)
				} else {
					bad = append(bad, s)
				}
			}
			var t revtree.Tree
			if rec != nil {
				t = rec.tree
			}
			missing := t.Missing(parsed)
			if len(missing) == 0 && len(bad) == 0 {
				continue
			}
			d := RevsDiff{Missing: append(revStrings(missing), bad...)}
			if rec != nil {
				d.PossibleAncestors = revStrings(t.PossibleAncestors(missing))
			}
			out[id] = d
		}
		return nil
	})
	return out, err
}
