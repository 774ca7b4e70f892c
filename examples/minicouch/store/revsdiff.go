package store

import "context"

// RevsDiff answers _revs_diff: for each document id, the given revs the
// database does not have (sorted ascending) and the possible ancestors
// among its leaves. Documents with nothing missing are left out.
func (db *DB) RevsDiff(ctx context.Context, req map[string][]string) (map[string]RevsDiff, error) {
	return db.revsDiff(ctx, req)
}
