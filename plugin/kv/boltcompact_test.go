package kv_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// TestCompactBolt: values deleted or overwritten stay in a bolt file's free
// pages until CompactBolt rewrites it; the live data is kept.
func TestCompactBolt(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kv.db")
	secret := []byte("BOLT-SECRET-51c2e8")
	s, err := kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pad := bytes.Repeat([]byte("p"), 8<<10)
	update := func(fn func(tx kv.Tx)) {
		t.Helper()
		if err := s.Update(ctx, func(tx kv.Tx) error { fn(tx); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	update(func(tx kv.Tx) {
		tx.Set([]byte("gone"), append(append([]byte{}, secret...), pad...))
		tx.Set([]byte("kept"), []byte("live value"))
	})
	update(func(tx kv.Tx) { tx.Clear([]byte("gone")) })
	update(func(tx kv.Tx) { tx.Set([]byte("other"), []byte("x")) })
	if _, err := kv.OpenBolt(path, kv.BoltOptions{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, kv.ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	if err := kv.CompactBolt(path, 50*time.Millisecond); !errors.Is(err, kv.ErrLocked) {
		t.Fatalf("CompactBolt of an open file: %v, want ErrLocked", err)
	}
	s.Close()
	count := func() int {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, secret)
	}
	if count() == 0 {
		t.Fatal("the deleted value is not in the file before compaction: the test shows nothing")
	}
	if err := kv.CompactBolt(path, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("the deleted value is in the compacted file %d times", n)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	s, err = kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	err = s.View(ctx, func(tx kv.ReadTx) error {
		for k, want := range map[string]string{"kept": "live value", "other": "x", "gone": ""} {
			if v, err := tx.Get([]byte(k)); err != nil || string(v) != want {
				t.Errorf("%s = %q, %v; want %q", k, v, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Versionstamps keep increasing across the rewrite (the meta bucket
	// holding the counter was copied).
	var before, after kv.Versionstamp
	update(func(tx kv.Tx) { before = tx.Versionstamp() })
	s.Close()
	if err := kv.CompactBolt(path, time.Second); err != nil {
		t.Fatal(err)
	}
	s, err = kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	update(func(tx kv.Tx) { after = tx.Versionstamp() })
	if bytes.Compare(after[:], before[:]) <= 0 {
		t.Fatalf("versionstamp %x after compaction, %x before", after, before)
	}
}
