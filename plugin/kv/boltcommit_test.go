package kv

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
)

// TestBoltNothingWrittenIsNotCommitted: an Update that only reads (an
// accept that finds nothing) costs no commit — no page is written — alone
// or grouped with others, while any write, a versionstamp included, still
// commits for the whole group.
func TestBoltNothingWrittenIsNotCommitted(t *testing.T) {
	ctx := context.Background()
	read := func(tx Tx) error {
		_, err := tx.Get([]byte("k"))
		return err
	}
	tests := []struct {
		name   string
		fns    []func(Tx) error // run at once, so that they may share a commit
		writes bool
	}{
		{"a read alone", []func(Tx) error{read}, false},
		{"reads together", []func(Tx) error{read, read, read, read}, false},
		{"a set", []func(Tx) error{func(tx Tx) error { tx.Set([]byte("k"), []byte("v")); return nil }}, true},
		{"a versionstamp", []func(Tx) error{func(tx Tx) error { tx.Versionstamp(); return nil }}, true},
		{"reads with a clear", []func(Tx) error{read, func(tx Tx) error { tx.Clear([]byte("gone")); return nil }, read}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := OpenBolt(filepath.Join(t.TempDir(), "kv.db"), BoltOptions{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			s := st.(*boltStore)
			pagesWritten := func() int64 { st := s.db.Stats(); return st.TxStats.GetWrite() }
			before := pagesWritten()
			var wg sync.WaitGroup
			errs := make([]error, len(tc.fns))
			for i, fn := range tc.fns {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = s.Update(ctx, fn) }()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("Update: %v", err)
				}
			}
			if wrote := pagesWritten() > before; wrote != tc.writes {
				t.Errorf("pages written: %v, want %v", wrote, tc.writes)
			}
		})
	}
}

// TestBoltVersionstampAfterReadOnly: versionstamps keep increasing across
// Updates that wrote nothing in between.
func TestBoltVersionstampAfterReadOnly(t *testing.T) {
	ctx := context.Background()
	s, err := OpenBolt(filepath.Join(t.TempDir(), "kv.db"), BoltOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last Versionstamp
	for i := range 3 {
		var vs Versionstamp
		if err := s.Update(ctx, func(tx Tx) error { vs = tx.Versionstamp(); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx Tx) error { _, err := tx.Get([]byte("x")); return err }); err != nil {
			t.Fatal(err)
		}
		if i > 0 && bytes.Compare(vs[:], last[:]) <= 0 {
			t.Fatalf("versionstamp %x after %x", vs, last)
		}
		last = vs
	}
}
