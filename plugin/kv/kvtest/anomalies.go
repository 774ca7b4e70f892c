package kvtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// The tests in this file catch backends weaker than serializable: each
// runs two transactions that overlap in time, makes the second commit while
// the first is still open, and checks the end state matches one of the two
// serial orders. On a backend that runs one Update at a time the overlap
// never happens (the second waits), which is also serializable.

// overlap runs first and second concurrently. Inside first, pause() lets
// second run to completion before first goes on (or gives up waiting after
// a short time, on backends where second cannot start while first is
// open). Only the first attempt of first pauses.
func overlap(t *testing.T, s kv.Store, first func(tx kv.Tx, pause func()) error, second func(tx kv.Tx) error) {
	t.Helper()
	ctx := context.Background()
	secondDone := make(chan error, 1)
	startSecond := make(chan struct{})
	var once sync.Once
	go func() {
		<-startSecond
		secondDone <- s.Update(ctx, second)
	}()
	var secondErr error
	waited := false
	pause := func() {
		once.Do(func() {
			close(startSecond)
			select {
			case secondErr = <-secondDone:
				waited = true
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
	if err := s.Update(ctx, func(tx kv.Tx) error { return first(tx, pause) }); err != nil {
		t.Fatal(err)
	}
	once.Do(func() { close(startSecond) })
	if !waited {
		secondErr = <-secondDone
	}
	if secondErr != nil {
		t.Fatal(secondErr)
	}
}

func readInt(tx kv.ReadTx, key string) int {
	v, _ := tx.Get([]byte(key))
	n := 0
	fmt.Sscan(string(v), &n)
	return n
}

// testWriteSkew: x+y must stay ≥ 1. Each transaction reads both and zeroes
// one only if both are 1; without read validation both commit.
func testWriteSkew(t *testing.T, s kv.Store) {
	set(t, s, "x", "1", "y", "1")
	zeroIfBoth := func(key string) func(tx kv.Tx) error {
		return func(tx kv.Tx) error {
			if readInt(tx, "x")+readInt(tx, "y") == 2 {
				tx.Set([]byte(key), []byte("0"))
			}
			return nil
		}
	}
	overlap(t, s,
		func(tx kv.Tx, pause func()) error {
			both := readInt(tx, "x")+readInt(tx, "y") == 2
			pause()
			if both {
				tx.Set([]byte("x"), []byte("0"))
			}
			return nil
		},
		zeroIfBoth("y"))
	x, y := string(get(t, s, "x")), string(get(t, s, "y"))
	if x == "0" && y == "0" {
		t.Fatalf("write skew: both transactions committed on the same snapshot (x=%s y=%s)", x, y)
	}
}

// testPhantom covers inserts into and deletes from a range another
// transaction read. The reader counts keys under p/ and stores the count;
// the writer reads the stored count (before the reader commits) and then
// changes the range. Serial orders: reader first (the writer saw its
// count) or writer first (the count includes the change). The anomaly is
// neither: the writer saw no count and the count misses the change.
func testPhantom(change string) func(t *testing.T, s kv.Store) {
	return func(t *testing.T, s kv.Store) {
		set(t, s, "p/1", "a", "p/2", "b", "p/3", "c")
		count := func(tx kv.ReadTx) (int, error) {
			n := 0
			err := tx.Range([]byte("p/"), []byte("p0"), kv.RangeOptions{}, func(k, v []byte) error { n++; return nil })
			return n, err
		}
		writerSaw := "?"
		overlap(t, s,
			func(tx kv.Tx, pause func()) error {
				n, err := count(tx)
				if err != nil {
					return err
				}
				pause()
				tx.Set([]byte("count"), []byte(fmt.Sprint(n)))
				return nil
			},
			func(tx kv.Tx) error {
				v, err := tx.Get([]byte("count"))
				if err != nil {
					return err
				}
				writerSaw = string(v)
				tx.Set([]byte("writer-saw"), v)
				switch change {
				case "insert":
					tx.Set([]byte("p/22"), []byte("new"))
				case "delete":
					tx.Clear([]byte("p/2"))
				case "clear range":
					tx.ClearRange([]byte("p/2"), []byte("p/3"))
				}
				return nil
			})
		final := 4
		if change != "insert" {
			final = 2
		}
		got := string(get(t, s, "count"))
		if writerSaw == "" && got != fmt.Sprint(final) {
			t.Fatalf("phantom %s: the writer ran before the reader's commit (saw no count) but the count is %s, want %d", change, got, final)
		}
	}
}

// testLostUpdate: many writers increment one counter by read-modify-write
// and by Add at the same time; every increment must count.
func testLostUpdate(t *testing.T, s kv.Store) {
	const workers, each = 6, 15
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := s.Update(context.Background(), func(tx kv.Tx) error {
					if w%2 == 0 {
						tx.Add([]byte("c"), 1)
						return nil
					}
					v, err := tx.Get([]byte("c"))
					if err != nil {
						return err
					}
					var b [8]byte
					copy(b[:], v)
					b[0]++ // little-endian +1 (stays below 256 here)
					tx.Set([]byte("c"), b[:])
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if got := counter(t, s, "c"); got != workers*each {
		t.Fatalf("lost updates: counter %d, want %d", got, workers*each)
	}
}

// testLargeTx writes, reads and clears more keys in one transaction than
// etcd allows operations in one Txn (128 by default).
func testLargeTx(t *testing.T, s kv.Store) {
	const n = 1000
	ctx := context.Background()
	err := s.Update(ctx, func(tx kv.Tx) error {
		for i := 0; i < n; i++ {
			tx.Set([]byte(fmt.Sprintf("big/%04d", i)), []byte(fmt.Sprint(i)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Read every key individually (one compare each) and write them all.
	err = s.Update(ctx, func(tx kv.Tx) error {
		for i := 0; i < n; i++ {
			k := []byte(fmt.Sprintf("big/%04d", i))
			v, err := tx.Get(k)
			if err != nil {
				return err
			}
			if string(v) != fmt.Sprint(i) {
				return fmt.Errorf("%s = %q, want %d", k, v, i)
			}
			tx.Set(k, append(v, '+'))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = s.View(ctx, func(tx kv.ReadTx) error {
		return tx.Range([]byte("big/"), []byte("big0"), kv.RangeOptions{}, func(k, v []byte) error {
			if string(v) != fmt.Sprintf("%d+", seen) {
				return fmt.Errorf("%s = %q, want %d+", k, v, seen)
			}
			seen++
			return nil
		})
	})
	if err != nil || seen != n {
		t.Fatalf("after large update: %d keys, err %v; want %d", seen, err, n)
	}
	if err := s.Update(ctx, func(tx kv.Tx) error { tx.ClearRange([]byte("big/"), []byte("big0")); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, s, "big/", "big0", kv.RangeOptions{}); got != "[]" {
		t.Fatalf("after large ClearRange: %.80s…", got)
	}
}

// testWatchConcurrentWriters: while writers keep changing a key, every
// watch set by a reader fires, and the value read after it differs from the
// value read before it.
func testWatchConcurrentWriters(t *testing.T, s kv.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				err := s.Update(ctx, func(tx kv.Tx) error {
					n := readInt(tx, "hot")
					tx.Set([]byte("hot"), []byte(fmt.Sprint(n+1)))
					tx.Set([]byte(fmt.Sprintf("cold%d", w)), []byte(fmt.Sprint(i)))
					return nil
				})
				if err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}(w)
	}
	for i := 0; i < 30; i++ {
		before := string(get(t, s, "hot"))
		ch, err := s.Watch(ctx, []byte("hot"))
		if err != nil {
			t.Fatal(err)
		}
		if !fired(ch, 5*time.Second) {
			t.Fatalf("watch %d did not fire while writers ran", i)
		}
		if after := string(get(t, s, "hot")); after == before {
			// A spurious fire is allowed, but writers never store the
			// same value twice; give the next read a moment.
			time.Sleep(50 * time.Millisecond)
			if after = string(get(t, s, "hot")); after == before {
				t.Fatalf("watch %d fired but the value stayed %s", i, before)
			}
		}
	}
	cancel()
	wg.Wait()
}
