package kv_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/kvtest"
)

func TestMemory(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store { return kv.NewMemory() })
}

func TestBolt(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		s, err := kv.OpenBolt(filepath.Join(t.TempDir(), "kv.db"), kv.BoltOptions{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestBoltSecondOpenerFails checks the one-owner file lock: a second opener
// gets ErrLocked after the timeout instead of hanging.
func TestBoltSecondOpenerFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.db")
	s, err := kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.OpenBolt(path, kv.BoltOptions{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, kv.ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
	s.Close()
	s2, err := kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s2.Close()
}

// TestBoltDurable checks committed data and the versionstamp counter
// survive close and reopen.
func TestBoltDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.db")
	s, err := kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vs1 kv.Versionstamp
	err = s.Update(t.Context(), func(tx kv.Tx) error {
		vs1 = tx.Versionstamp()
		tx.Set([]byte("k"), []byte("v"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var vs2 kv.Versionstamp
	var v []byte
	err = s.Update(t.Context(), func(tx kv.Tx) error {
		vs2 = tx.Versionstamp()
		v, err = tx.Get([]byte("k"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(v) != "v" {
		t.Fatalf("after reopen: got %q", v)
	}
	if vs2.Compare(vs1) <= 0 {
		t.Fatalf("versionstamp went backwards across reopen: %s then %s", vs1, vs2)
	}
}

func TestPrefixEnd(t *testing.T) {
	cases := []struct{ in, want string }{
		{"a", "b"},
		{"a\xff", "b"},
		{"a\xfe", "a\xff"},
		{"\xff\xff", ""},
	}
	for _, c := range cases {
		if got := string(kv.PrefixEnd([]byte(c.in))); got != c.want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
