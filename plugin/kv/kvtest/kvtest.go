// Package kvtest is the conformance suite every kv.Store backend must pass.
// It is public so that a backend written outside this repository is held
// to the same suite as bolt, etcd and FoundationDB.
package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Run runs the conformance suite; open returns a fresh, empty store (the
// suite closes it).
func Run(t *testing.T, open func(t *testing.T) kv.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s kv.Store)
	}{
		{"GetSetClear", testGetSetClear},
		{"ClearRange", testClearRange},
		{"Range", testRange},
		{"RangeKeysOnly", testRangeKeysOnly},
		{"SnapshotRanges", testSnapshotRanges},
		{"Prefetch", testPrefetch},
		{"Add", testAdd},
		{"ConcurrentAdd", testConcurrentAdd},
		{"SerializableReadModifyWrite", testSerializable},
		{"Versionstamp", testVersionstamp},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"Watch", testWatch},
		{"RetryOnConflict", testRetry},
		{"ReadYourWrites", testReadYourWrites},
		{"Rollback", testRollback},
		{"WriteSkew", testWriteSkew},
		{"PhantomInsert", testPhantom("insert")},
		{"PhantomDelete", testPhantom("delete")},
		{"PhantomClearRange", testPhantom("clear range")},
		{"NoLostUpdate", testLostUpdate},
		{"LargeTransaction", testLargeTx},
		{"WatchConcurrentWriters", testWatchConcurrentWriters},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			defer s.Close()
			tc.fn(t, s)
		})
	}
}

func set(t *testing.T, s kv.Store, kvs ...string) {
	t.Helper()
	err := s.Update(context.Background(), func(tx kv.Tx) error {
		for i := 0; i+1 < len(kvs); i += 2 {
			tx.Set([]byte(kvs[i]), []byte(kvs[i+1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s kv.Store, key string) []byte {
	t.Helper()
	var v []byte
	err := s.View(context.Background(), func(tx kv.ReadTx) error {
		var err error
		v, err = tx.Get([]byte(key))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func keys(t *testing.T, s kv.Store, begin, end string, opt kv.RangeOptions) string {
	t.Helper()
	var out []string
	var e []byte
	if end != "" {
		e = []byte(end)
	}
	err := s.View(context.Background(), func(tx kv.ReadTx) error {
		return tx.Range([]byte(begin), e, opt, func(k, v []byte) error {
			out = append(out, string(k)+"="+string(v))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(out)
}

func testGetSetClear(t *testing.T, s kv.Store) {
	if v := get(t, s, "a"); v != nil {
		t.Fatalf("absent key: got %q, want nil", v)
	}
	set(t, s, "a", "1", "empty", "")
	if v := get(t, s, "a"); string(v) != "1" {
		t.Fatalf("got %q, want 1", v)
	}
	if v := get(t, s, "empty"); v == nil || len(v) != 0 {
		t.Fatalf("empty value: got %#v, want non-nil empty", v)
	}
	set(t, s, "a", "2")
	if v := get(t, s, "a"); string(v) != "2" {
		t.Fatalf("overwrite: got %q, want 2", v)
	}
	err := s.Update(context.Background(), func(tx kv.Tx) error { tx.Clear([]byte("a")); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if v := get(t, s, "a"); v != nil {
		t.Fatalf("cleared key: got %q", v)
	}
}

func testClearRange(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "b", "2", "b\x00", "3", "bz", "4", "c", "5")
	err := s.Update(context.Background(), func(tx kv.Tx) error {
		tx.ClearRange([]byte("b"), []byte("c"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, s, "", "\xff", kv.RangeOptions{}), "[a=1 c=5]"; got != want {
		t.Fatalf("after ClearRange: got %s, want %s", got, want)
	}
}

func testRange(t *testing.T, s kv.Store) {
	set(t, s, "k1", "1", "k2", "2", "k3", "3", "k4", "4", "l", "x", "j", "y")
	end := string(kv.PrefixEnd([]byte("k")))
	cases := []struct {
		name       string
		begin, end string
		opt        kv.RangeOptions
		want       string
	}{
		{"all prefix", "k", end, kv.RangeOptions{}, "[k1=1 k2=2 k3=3 k4=4]"},
		{"limit", "k", end, kv.RangeOptions{Limit: 2}, "[k1=1 k2=2]"},
		{"reverse", "k", end, kv.RangeOptions{Reverse: true}, "[k4=4 k3=3 k2=2 k1=1]"},
		{"reverse limit", "k", end, kv.RangeOptions{Reverse: true, Limit: 3}, "[k4=4 k3=3 k2=2]"},
		{"end exclusive", "k2", "k4", kv.RangeOptions{}, "[k2=2 k3=3]"},
		{"reverse end exclusive", "k2", "k4", kv.RangeOptions{Reverse: true}, "[k3=3 k2=2]"},
		{"empty", "m", "z", kv.RangeOptions{}, "[]"},
		{"reverse past end", "k", "zz", kv.RangeOptions{Reverse: true, Limit: 1}, "[l=x]"},
	}
	for _, c := range cases {
		if got := keys(t, s, c.begin, c.end, c.opt); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	stop := errors.New("stop")
	n := 0
	err := s.View(context.Background(), func(tx kv.ReadTx) error {
		return tx.Range([]byte("k"), []byte(end), kv.RangeOptions{}, func(k, v []byte) error {
			n++
			return stop
		})
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("error from fn: got %v after %d keys, want stop after 1", err, n)
	}
}

// errRollback makes Update roll back a transaction that only looked.
var errRollback = errors.New("roll back")

// testRangeKeysOnly: a keys-only range returns the same keys as a full
// one (values may be left out), reads through the transaction's own
// writes, and a later Get in the same transaction still sees the value
// (a store that cached the keys-only pairs would answer empty values).
// testSnapshotRanges checks, on backends that batch range reads, that a
// batch returns what each SnapshotRange would, own writes included, and
// that its first read fixes the snapshot later reads see.
func testSnapshotRanges(t *testing.T, s kv.Store) {
	ctx := context.Background()
	set(t, s, "a1", "1", "a2", "2", "a3", "3", "b1", "1", "b2", "2", "c1", "1")
	rs := []kv.RangeRequest{
		{Begin: []byte("a"), End: []byte("b"), Opt: kv.RangeOptions{}},
		{Begin: []byte("a"), End: []byte("b"), Opt: kv.RangeOptions{Limit: 2, KeysOnly: true}},
		{Begin: []byte("b"), End: []byte("c"), Opt: kv.RangeOptions{Reverse: true}},
		{Begin: []byte("c"), End: []byte("d"), Opt: kv.RangeOptions{Limit: 1}},
		{Begin: []byte("x"), End: []byte("y")},
		{Begin: []byte("a"), End: nil, Opt: kv.RangeOptions{Limit: 3}},
	}
	batches := false
	s.Update(ctx, func(tx kv.Tx) error {
		_, batches = tx.(kv.BatchSnapshotTx)
		return errRollback
	})
	if !batches {
		t.Skip("the backend does not batch range reads")
	}
	err := s.Update(ctx, func(tx kv.Tx) error {
		batch, snap := tx.(kv.BatchSnapshotTx), tx.(kv.SnapshotTx)
		first := true
		for _, own := range []bool{false, true} {
			if own {
				tx.Set([]byte("a15"), []byte("15"))
				tx.Clear([]byte("a2"))
				tx.Set([]byte("c0"), []byte("0"))
			}
			got := make([][]string, len(rs))
			err := batch.SnapshotRanges(rs, func(i int, k, v []byte) error {
				got[i] = append(got[i], string(k)+"="+string(v))
				return nil
			})
			if err != nil {
				return err
			}
			if first {
				// Written after the batch's first read: not seen by
				// this transaction's reads.
				set(t, s, "a0", "0", "b3", "3")
				first = false
			}
			for i, r := range rs {
				var want []string
				err := snap.SnapshotRange(r.Begin, r.End, r.Opt, func(k, v []byte) error {
					want = append(want, string(k)+"="+string(v))
					return nil
				})
				if err != nil {
					return err
				}
				if r.Opt.KeysOnly {
					for j := range got[i] {
						got[i][j], _, _ = strings.Cut(got[i][j], "=")
					}
					for j := range want {
						want[j], _, _ = strings.Cut(want[j], "=")
					}
				}
				if fmt.Sprint(got[i]) != fmt.Sprint(want) {
					t.Errorf("own writes %v, range %d: batch %v, SnapshotRange %v", own, i, got[i], want)
				}
			}
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
}

// testPrefetch: Gets of prefetched keys return what Get alone would (the
// transaction's own writes, absent keys, values at its read revision); a
// prefetched key the transaction then Gets conflicts when it changed, and
// one it only prefetched does not.
func testPrefetch(t *testing.T, s kv.Store) {
	ctx := context.Background()
	set(t, s, "p1", "1", "p2", "2", "p3", "3")
	prefetches := false
	s.Update(ctx, func(tx kv.Tx) error {
		_, prefetches = tx.(kv.PrefetchTx)
		return errRollback
	})
	if !prefetches {
		t.Skip("the backend does not prefetch")
	}
	attempts := 0
	err := s.Update(ctx, func(tx kv.Tx) error {
		attempts++
		tx.Set([]byte("p4"), []byte("own"))
		if err := tx.(kv.PrefetchTx).Prefetch([]byte("p1"), []byte("p2"), []byte("p4"), []byte("p9")); err != nil {
			return err
		}
		if attempts == 1 {
			// After the prefetch: p1 is then read (a conflict), p2 not.
			set(t, s, "p1", "changed", "p2", "changed")
		}
		want := map[string]string{"p1": "1", "p4": "own", "p9": ""}
		if attempts > 1 {
			want["p1"] = "changed"
		}
		for k, v := range want {
			got, err := tx.Get([]byte(k))
			if err != nil {
				return err
			}
			if string(got) != v || (v == "" && got != nil) {
				t.Errorf("attempt %d: Get(%s) = %q after Prefetch, want %q", attempts, k, got, v)
			}
		}
		tx.Set([]byte("p5"), []byte("5"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Errorf("%d attempts, want 2: a changed key that was prefetched, then read, must conflict", attempts)
	}
	attempts = 0
	err = s.Update(ctx, func(tx kv.Tx) error {
		attempts++
		if err := tx.(kv.PrefetchTx).Prefetch([]byte("p3")); err != nil {
			return err
		}
		if attempts == 1 {
			set(t, s, "p3", "changed")
		}
		tx.Set([]byte("p6"), []byte("6"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("%d attempts, want 1: a key only prefetched is not read", attempts)
	}
}

func testRangeKeysOnly(t *testing.T, s kv.Store) {
	set(t, s, "k1", "1", "k2", "2", "k3", "3", "k4", "4")
	end := []byte(kv.PrefixEnd([]byte("k")))
	cases := []struct {
		name string
		opt  kv.RangeOptions
		want string
	}{
		{"all", kv.RangeOptions{KeysOnly: true}, "[k1 k2 k4 k5]"},
		{"limit", kv.RangeOptions{KeysOnly: true, Limit: 2}, "[k1 k2]"},
		{"reverse limit", kv.RangeOptions{KeysOnly: true, Reverse: true, Limit: 2}, "[k5 k4]"},
	}
	for _, c := range cases {
		err := s.Update(context.Background(), func(tx kv.Tx) error {
			tx.Set([]byte("k5"), []byte("5"))
			tx.Clear([]byte("k3"))
			var got []string
			err := tx.Range([]byte("k"), end, c.opt, func(k, v []byte) error {
				got = append(got, string(k))
				if len(v) > 0 && string(v) != string(k[1:]) {
					t.Errorf("%s: %s has value %q", c.name, k, v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if fmt.Sprint(got) != c.want {
				t.Errorf("%s: got %v, want %s", c.name, got, c.want)
			}
			for _, k := range []string{"k1", "k2", "k4"} {
				if v, err := tx.Get([]byte(k)); err != nil || string(v) != k[1:] {
					t.Errorf("%s: Get(%s) after the range = %q, %v", c.name, k, v, err)
				}
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
	}
}

func counter(t *testing.T, s kv.Store, key string) int64 {
	t.Helper()
	v := get(t, s, key)
	var b [8]byte
	copy(b[:], v)
	var n int64
	for i := 7; i >= 0; i-- {
		n = n<<8 | int64(b[i])
	}
	return n
}

func testAdd(t *testing.T, s kv.Store) {
	ctx := context.Background()
	for _, d := range []int64{5, -7, 1 << 40} {
		if err := s.Update(ctx, func(tx kv.Tx) error { tx.Add([]byte("c"), d); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := counter(t, s, "c"), int64(5-7+1<<40); got != want {
		t.Fatalf("counter: got %d, want %d", got, want)
	}
}

func testConcurrentAdd(t *testing.T, s kv.Store) {
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := s.Update(context.Background(), func(tx kv.Tx) error { tx.Add([]byte("c"), 1); return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := counter(t, s, "c"); got != workers*each {
		t.Fatalf("counter: got %d, want %d", got, workers*each)
	}
}

func testSerializable(t *testing.T, s kv.Store) {
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := s.Update(context.Background(), func(tx kv.Tx) error {
					v, err := tx.Get([]byte("n"))
					if err != nil {
						return err
					}
					n := 0
					fmt.Sscan(string(v), &n)
					tx.Set([]byte("n"), []byte(fmt.Sprint(n+1)))
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := string(get(t, s, "n")); got != fmt.Sprint(workers*each) {
		t.Fatalf("read-modify-write lost updates: got %s, want %d", got, workers*each)
	}
}

func testVersionstamp(t *testing.T, s kv.Store) {
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		err := s.Update(ctx, func(tx kv.Tx) error {
			vs := tx.Versionstamp()
			if again := tx.Versionstamp(); again != vs {
				return fmt.Errorf("versionstamp changed within a tx: %s then %s", vs, again)
			}
			tx.Set([]byte(fmt.Sprintf("vs%d", i)), vs[:])
			key := append([]byte("vskey/"), vs[:]...)
			tx.Set(key, []byte{byte(i)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var prev []byte
	for i := 0; i < 5; i++ {
		v := get(t, s, fmt.Sprintf("vs%d", i))
		if len(v) != 10 {
			t.Fatalf("versionstamp %d: %d bytes, want 10", i, len(v))
		}
		if prev != nil && bytes.Compare(prev, v) >= 0 {
			t.Fatalf("versionstamps not increasing: %x then %x", prev, v)
		}
		prev = v
	}
	if got := keys(t, s, "vskey/", string(kv.PrefixEnd([]byte("vskey/"))), kv.RangeOptions{}); got != "[vskey/"+string(get(t, s, "vs0"))+"=\x00 vskey/"+string(get(t, s, "vs1"))+"=\x01 vskey/"+string(get(t, s, "vs2"))+"=\x02 vskey/"+string(get(t, s, "vs3"))+"=\x03 vskey/"+string(get(t, s, "vs4"))+"=\x04]" {
		t.Fatalf("versionstamped keys not in commit order: %q", got)
	}
}

// testConcurrentUpdates checks what backends that share commits between
// concurrent Updates must keep: every Update is its own transaction, with
// a unique versionstamp whose order is the order the Updates took effect,
// and one that fails leaves nothing and fails no other.
func testConcurrentUpdates(t *testing.T, s kv.Store) {
	ctx := context.Background()
	errRefused := errors.New("refused")
	const writers, each = 20, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				fail := (w*each+i)%7 == 3
				err := s.Update(ctx, func(tx kv.Tx) error {
					cur, err := tx.Get([]byte("n"))
					if err != nil {
						return err
					}
					tx.Add([]byte("n"), 1)
					vs := tx.Versionstamp()
					tx.Set(append([]byte("order/"), vs[:]...), []byte(fmt.Sprintf("%04d", decodeLE(cur))))
					if fail {
						tx.Set([]byte(fmt.Sprintf("failed/%d/%d", w, i)), []byte("x"))
						return errRefused
					}
					return nil
				})
				if fail != errors.Is(err, errRefused) || !fail && err != nil {
					errs <- fmt.Errorf("update %d/%d (fail=%v): %v", w, i, fail, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := keys(t, s, "failed/", "failed0", kv.RangeOptions{}); got != "[]" {
		t.Fatalf("a failed update left writes: %s", got)
	}
	committed := 0
	for k := 0; k < writers*each; k++ {
		if k%7 != 3 {
			committed++
		}
	}
	if n := decodeLE(get(t, s, "n")); n != int64(committed) {
		t.Fatalf("counter %d, want %d committed updates", n, committed)
	}
	// Versionstamp order is commit order: the counter each one read
	// increases with its versionstamp, with no gaps and no repeats.
	var want int64
	err := s.View(ctx, func(tx kv.ReadTx) error {
		return tx.Range([]byte("order/"), kv.PrefixEnd([]byte("order/")), kv.RangeOptions{}, func(k, v []byte) error {
			if string(v) != fmt.Sprintf("%04d", want) {
				return fmt.Errorf("update at versionstamp %x read counter %s, want %04d", k[len("order/"):], v, want)
			}
			want++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want != int64(committed) {
		t.Fatalf("%d versionstamped keys, want %d", want, committed)
	}
}

// decodeLE reads a counter written by Tx.Add (absent: 0).
func decodeLE(b []byte) int64 {
	var n int64
	for i := len(b) - 1; i >= 0; i-- {
		n = n<<8 | int64(b[i])
	}
	return n
}

func fired(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func testWatch(t *testing.T, s kv.Store) {
	ctx := context.Background()
	set(t, s, "w", "0")
	w, err := s.Watch(ctx, []byte("w"))
	if err != nil {
		t.Fatal(err)
	}
	set(t, s, "other", "1", "w0", "x")
	if fired(w, 200*time.Millisecond) {
		t.Fatal("watch fired on unrelated keys")
	}
	set(t, s, "w", "1")
	if !fired(w, 5*time.Second) {
		t.Fatal("watch did not fire on change")
	}

	w, err = s.Watch(ctx, []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx kv.Tx) error { tx.Add([]byte("c"), 1); return nil }); err != nil {
		t.Fatal(err)
	}
	if !fired(w, 5*time.Second) {
		t.Fatal("watch did not fire on Add")
	}

	w, err = s.Watch(ctx, []byte("w"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx kv.Tx) error { tx.ClearRange([]byte("v"), []byte("x")); return nil }); err != nil {
		t.Fatal(err)
	}
	if !fired(w, 5*time.Second) {
		t.Fatal("watch did not fire on ClearRange")
	}

	w, err = s.Watch(ctx, []byte("r"))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Update(ctx, func(tx kv.Tx) error { tx.Set([]byte("r"), []byte("1")); return errors.New("abort") })
	if fired(w, 200*time.Millisecond) {
		t.Fatal("watch fired on a rolled-back write")
	}

	cctx, cancel := context.WithCancel(ctx)
	w, err = s.Watch(cctx, []byte("never"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if !fired(w, 5*time.Second) {
		t.Fatal("watch not closed when its context ended")
	}
}

func testRetry(t *testing.T, s kv.Store) {
	attempts := 0
	err := s.Update(context.Background(), func(tx kv.Tx) error {
		attempts++
		tx.Set([]byte(fmt.Sprintf("attempt%d", attempts)), []byte("x"))
		if attempts < 3 {
			return fmt.Errorf("simulated: %w", kv.ErrConflict)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 3 {
		t.Fatalf("attempts: got %d, want 3", attempts)
	}
	if got, want := keys(t, s, "attempt", "attempu", kv.RangeOptions{}), "[attempt3=x]"; got != want {
		t.Fatalf("writes of conflicted attempts leaked: got %s, want %s", got, want)
	}
}

func testReadYourWrites(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "c", "3")
	err := s.Update(context.Background(), func(tx kv.Tx) error {
		tx.Set([]byte("b"), []byte("2"))
		tx.Clear([]byte("c"))
		tx.Add([]byte("n"), 4)
		if v, _ := tx.Get([]byte("b")); string(v) != "2" {
			return fmt.Errorf("own Set not visible: %q", v)
		}
		if v, _ := tx.Get([]byte("c")); v != nil {
			return fmt.Errorf("own Clear not visible: %q", v)
		}
		if v, _ := tx.Get([]byte("n")); len(v) != 8 || v[0] != 4 {
			return fmt.Errorf("own Add not visible: %x", v)
		}
		var got []string
		err := tx.Range([]byte("a"), []byte("d"), kv.RangeOptions{}, func(k, v []byte) error {
			got = append(got, string(k))
			return nil
		})
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != "[a b]" {
			return fmt.Errorf("own writes not in range: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testRollback(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "b", "2")
	boom := errors.New("boom")
	err := s.Update(context.Background(), func(tx kv.Tx) error {
		tx.Set([]byte("a"), []byte("changed"))
		tx.Set([]byte("new"), []byte("x"))
		tx.Clear([]byte("b"))
		tx.ClearRange([]byte("a"), []byte("z"))
		tx.Add([]byte("n"), 1)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the function's error", err)
	}
	if got, want := keys(t, s, "", "\xff", kv.RangeOptions{}), "[a=1 b=2]"; got != want {
		t.Fatalf("after rollback: got %s, want %s", got, want)
	}
}
