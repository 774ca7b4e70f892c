package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func openTest(t testing.TB) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func createTest(t testing.TB, s *Store, name string) *DB {
	t.Helper()
	db, err := s.CreateDB(name)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func mustParse(t testing.TB, js string) *Doc {
	t.Helper()
	d, err := ParseDoc([]byte(js))
	if err != nil {
		t.Fatalf("ParseDoc(%s): %v", js, err)
	}
	return d
}

func put(t testing.TB, db *DB, js string) string {
	t.Helper()
	rev, err := db.Put(context.Background(), mustParse(t, js), true)
	if err != nil {
		t.Fatalf("Put(%s): %v", js, err)
	}
	return rev
}

func putReplicated(t testing.TB, db *DB, js string) {
	t.Helper()
	if _, err := db.Put(context.Background(), mustParse(t, js), false); err != nil {
		t.Fatalf("Put new_edits=false (%s): %v", js, err)
	}
}

func docJSON(t testing.TB, d *DocRev) string {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// storedFigure is the bytes db holds in the file as its counter says,
// before Info raises it to at least Active.
func storedFigure(t testing.TB, db *DB) int64 {
	t.Helper()
	var n int64
	if err := db.view(func(b *bolt.Bucket) error {
		n = int64(getU64(b.Bucket(bucketMeta), metaFile))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
