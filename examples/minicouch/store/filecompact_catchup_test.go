package store

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// dumpBolt lists every bucket (with its sequence) and key of b, nested
// buckets indented.
func dumpBolt(t *testing.T, b *bolt.DB) string {
	t.Helper()
	var sb strings.Builder
	var walk func(bk *bolt.Bucket, depth int)
	walk = func(bk *bolt.Bucket, depth int) {
		fmt.Fprintf(&sb, "%*sseq=%d\n", depth*2, "", bk.Sequence())
		bk.ForEach(func(k, v []byte) error {
			if v == nil && bk.Bucket(k) != nil {
				fmt.Fprintf(&sb, "%*s[%s]\n", depth*2, "", k)
				walk(bk.Bucket(k), depth+1)
			} else {
				fmt.Fprintf(&sb, "%*s%s=%q\n", depth*2, "", k, v)
			}
			return nil
		})
	}
	if err := b.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			fmt.Fprintf(&sb, "[%s]\n", name)
			walk(bk, 1)
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// TestCatchUp copies a file, changes the original and checks that catchUp
// brings the copy to the same content, for each kind of change.
func TestCatchUp(t *testing.T) {
	tests := []struct {
		name   string
		change func(tx *bolt.Tx) error
	}{
		{"nothing", func(*bolt.Tx) error { return nil }},
		{"put a new key", func(tx *bolt.Tx) error { return tx.Bucket([]byte("a")).Put([]byte("k0"), []byte("new")) }},
		{"put after the last key", func(tx *bolt.Tx) error { return tx.Bucket([]byte("a")).Put([]byte("zz"), []byte("new")) }},
		{"overwrite a key", func(tx *bolt.Tx) error { return tx.Bucket([]byte("a")).Put([]byte("k2"), []byte("changed")) }},
		{"empty value", func(tx *bolt.Tx) error { return tx.Bucket([]byte("a")).Put([]byte("k2"), []byte{}) }},
		{"delete a key", func(tx *bolt.Tx) error { return tx.Bucket([]byte("a")).Delete([]byte("k1")) }},
		{"delete every key", func(tx *bolt.Tx) error {
			for _, k := range []string{"k1", "k2", "k3"} {
				if err := tx.Bucket([]byte("a")).Delete([]byte(k)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"delete a nested bucket", func(tx *bolt.Tx) error { return tx.Bucket([]byte("a")).DeleteBucket([]byte("n")) }},
		{"create a nested bucket", func(tx *bolt.Tx) error {
			nb, err := tx.Bucket([]byte("b")).CreateBucket([]byte("m"))
			if err != nil {
				return err
			}
			if err := nb.SetSequence(7); err != nil {
				return err
			}
			deeper, err := nb.CreateBucket([]byte("deeper"))
			if err != nil {
				return err
			}
			return deeper.Put([]byte("x"), []byte("y"))
		}},
		{"change in a nested bucket", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("a")).Bucket([]byte("n")).Put([]byte("x"), []byte("2"))
		}},
		{"create a top bucket", func(tx *bolt.Tx) error {
			nb, err := tx.CreateBucket([]byte("0first"))
			if err != nil {
				return err
			}
			return nb.Put([]byte("q"), []byte("r"))
		}},
		{"delete a top bucket", func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("b")) }},
		{"a key becomes a bucket", func(tx *bolt.Tx) error {
			a := tx.Bucket([]byte("a"))
			if err := a.Delete([]byte("k3")); err != nil {
				return err
			}
			nb, err := a.CreateBucket([]byte("k3"))
			if err != nil {
				return err
			}
			return nb.Put([]byte("in"), []byte("side"))
		}},
		{"a bucket becomes a key", func(tx *bolt.Tx) error {
			a := tx.Bucket([]byte("a"))
			if err := a.DeleteBucket([]byte("n")); err != nil {
				return err
			}
			return a.Put([]byte("n"), []byte("value"))
		}},
		{"sequence", func(tx *bolt.Tx) error {
			_, err := tx.Bucket([]byte("a")).NextSequence()
			return err
		}},
		{"many keys", func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("b"))
			for i := range 5000 {
				if err := b.Put(fmt.Appendf(nil, "many%05d", i), make([]byte, i%300)); err != nil {
					return err
				}
			}
			return b.Delete([]byte("big001"))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, err := bolt.Open(filepath.Join(dir, "src"), 0o600, boltOptions(Options{NoSync: true}))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if err := src.Update(func(tx *bolt.Tx) error {
				a, _ := tx.CreateBucket([]byte("a"))
				a.SetSequence(3)
				for _, k := range []string{"k1", "k2", "k3"} {
					a.Put([]byte(k), []byte("v-"+k))
				}
				n, _ := a.CreateBucket([]byte("n"))
				n.Put([]byte("x"), []byte("1"))
				b, _ := tx.CreateBucket([]byte("b"))
				for i := range 200 {
					b.Put(fmt.Appendf(nil, "big%03d", i), make([]byte, 1000+i))
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			dst, err := bolt.Open(filepath.Join(dir, "dst"), 0o600, boltOptions(Options{NoSync: true}))
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			if err := bolt.Compact(dst, src, 0); err != nil {
				t.Fatal(err)
			}
			if err := src.Update(tc.change); err != nil {
				t.Fatal(err)
			}
			txid, n, err := catchUp(dst, src)
			if err != nil {
				t.Fatal(err)
			}
			if last, _ := lastTxID(src); txid != last {
				t.Errorf("catchUp saw transaction %d, the last is %d", txid, last)
			}
			if want, got := dumpBolt(t, src), dumpBolt(t, dst); want != got {
				t.Fatalf("after catchUp (%d changes):\n%s\nwant\n%s", n, got, want)
			}
			if tc.name == "nothing" && n != 0 {
				t.Errorf("%d changes for none", n)
			}
			if err := dst.View(func(tx *bolt.Tx) error {
				for err := range tx.Check() {
					return err
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
