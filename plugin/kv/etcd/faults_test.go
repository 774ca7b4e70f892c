package etcd_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func counter(t *testing.T, s kv.Store, key string) int64 {
	t.Helper()
	var n int64
	err := s.View(context.Background(), func(tx kv.ReadTx) error {
		v, err := tx.Get([]byte(key))
		var b [8]byte
		copy(b[:], v)
		n = int64(binary.LittleEndian.Uint64(b[:]))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// faultyClient returns a client whose Txn calls fail with Unavailable as
// decided by fault: "after" sends the request (etcd applies it) and then
// reports a failure, as a connection lost before the answer would;
// "before" fails without sending.
func faultyClient(t *testing.T, endpoints []string, fault func() string) *clientv3.Client {
	intercept := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method != "/etcdserverpb.KV/Txn" {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		switch fault() {
		case "before":
			return status.Error(codes.Unavailable, "injected: connection lost before send")
		case "after":
			if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "injected: connection lost before the answer")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestAmbiguousCommit checks that a commit whose answer is lost is neither
// lost nor applied twice: the store resolves it through its marker.
func TestAmbiguousCommit(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	for _, fault := range []string{"before", "after"} {
		t.Run(fault, func(t *testing.T) {
			var calls atomic.Int32
			calls.Store(-1000) // disarmed while Open runs
			cli := faultyClient(t, c.Endpoints(), func() string {
				// The first commit fails; the resolver's own Txns pass.
				if calls.Add(1) == 1 {
					return fault
				}
				return ""
			})
			s, err := etcd.Open(t.Context(), etcd.Config{Client: cli, Prefix: "amb-" + fault + "/"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			calls.Store(0)
			attempts := 0
			err = s.Update(t.Context(), func(tx kv.Tx) error {
				attempts++
				tx.Add([]byte("n"), 1)
				return nil
			})
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			if got := counter(t, s, "n"); got != 1 {
				t.Fatalf("counter %d after one Update with a lost answer (%d attempts), want 1", got, attempts)
			}
			want := map[string]int{"before": 2, "after": 1}[fault]
			if attempts != want {
				t.Errorf("attempts %d, want %d", attempts, want)
			}
		})
	}
}

// TestCompactedReadRetries: a transaction whose read revision is compacted
// while it runs is retried at a new revision, not failed.
func TestCompactedReadRetries(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "compact/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	if err := s.Update(ctx, func(tx kv.Tx) error { tx.Set([]byte("a"), []byte("1")); return nil }); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err = s.Update(ctx, func(tx kv.Tx) error {
		attempts++
		if _, err := tx.Get([]byte("a")); err != nil {
			return err
		}
		if attempts == 1 {
			// Move the store on and compact past this read revision.
			r, err := cli.Put(ctx, "compact/other", "x")
			if err != nil {
				return err
			}
			if _, err := cli.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				return err
			}
		}
		_, err := tx.Get([]byte("b"))
		if err != nil {
			return err
		}
		tx.Set([]byte("b"), []byte("2"))
		return nil
	})
	if err != nil {
		t.Fatalf("Update across compaction: %v", err)
	}
	if attempts != 2 {
		t.Fatalf("attempts %d, want 2 (one retry after compaction)", attempts)
	}
}

// TestMemberCrash: while writers increment one counter through a 3-member
// cluster, one member stops; every Update that returned nil counted once,
// and the others say why they failed.
func TestMemberCrash(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "crash/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ok, unknown atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := s.Update(ctx, func(tx kv.Tx) error { tx.Add([]byte("n"), 1); return nil })
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, etcd.ErrUnknownResult):
					unknown.Add(1)
				default:
					t.Errorf("Update: %v", err)
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	c.Stop(0)
	wg.Wait()
	got := counter(t, s, "n")
	if got < ok.Load() || got > ok.Load()+unknown.Load() {
		t.Fatalf("counter %d, want between %d acknowledged and %d (+ unknown results)", got, ok.Load(), ok.Load()+unknown.Load())
	}
	t.Logf("%d acknowledged, %d unknown, counter %d", ok.Load(), unknown.Load(), got)
}

// TestOldTransactionConflicts: a transaction that read a range before the
// horizon moved past its read revision (its tombstones may be gone) must
// retry rather than commit.
func TestOldTransactionConflicts(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "old/", CleanInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if err := s.Update(ctx, func(tx kv.Tx) error { tx.Set([]byte("r/1"), []byte("x")); return nil }); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err = s.Update(ctx, func(tx kv.Tx) error {
		attempts++
		n := 0
		if err := tx.Range([]byte("r/"), []byte("r0"), kv.RangeOptions{}, func(k, v []byte) error { n++; return nil }); err != nil {
			return err
		}
		if attempts == 1 {
			// Another client deletes the key; wait until the cleaner has
			// moved the horizon past this transaction and dropped the
			// tombstone.
			if err := s.Update(ctx, func(tx kv.Tx) error { tx.Clear([]byte("r/1")); return nil }); err != nil {
				return err
			}
			time.Sleep(400 * time.Millisecond)
		}
		tx.Set([]byte("count"), []byte{byte(n)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts < 2 {
		t.Fatalf("a transaction older than the horizon committed (attempts %d)", attempts)
	}
	var got []byte
	s.View(ctx, func(tx kv.ReadTx) error { got, _ = tx.Get([]byte("count")); return nil })
	if len(got) != 1 || got[0] != 0 {
		t.Fatalf("count %v, want [0]", got)
	}
}

// TestCleanerRemovesTombstones: the cleaner removes every tombstone once
// the horizon passed it, many per commit.
func TestCleanerRemovesTombstones(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "clean/", CleanInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	const n = 300 // several cleaning commits
	for _, op := range []func(tx kv.Tx, i int){
		func(tx kv.Tx, i int) { tx.Set([]byte(fmt.Sprintf("k/%03d", i)), []byte("x")) },
		func(tx kv.Tx, i int) { tx.Clear([]byte(fmt.Sprintf("k/%03d", i))) },
	} {
		err := s.Update(ctx, func(tx kv.Tx) error {
			for i := range n {
				op(tx, i)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	tombs := func() int64 {
		resp, err := cli.Get(ctx, "clean/t/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	if got := tombs(); got != n {
		t.Fatalf("%d tombstones after deleting %d keys", got, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for tombs() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tombstones left after 10 s of cleaning", tombs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMarkersExpire: every commit leaves a marker key; they must not pile
// up in etcd while the store runs, only outlive their commits long enough
// to resolve an unknown outcome.
func TestMarkersExpire(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	// A new lease every 2 s.
	s, err := etcd.Open(t.Context(), etcd.LeaseTTL(etcd.Config{Endpoints: c.Endpoints(), Prefix: "markers/"}, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	commit := func(i int) {
		t.Helper()
		if err := s.Update(ctx, func(tx kv.Tx) error { tx.Set([]byte(fmt.Sprint("k", i)), []byte("x")); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	markers := func() map[string]bool {
		resp, err := cli.Get(ctx, "markers/m/c/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, kv := range resp.Kvs {
			m[string(kv.Key)] = true
		}
		return m
	}
	const n = 20
	for i := range n {
		commit(i)
	}
	first := markers()
	if len(first) != n {
		t.Fatalf("%d markers after %d commits", len(first), n)
	}
	// Commits go on, one every 100 ms: the first n's lease is no longer
	// renewed once it is 2 s old, and expires with their markers.
	left := func() int {
		now, k := markers(), 0
		for m := range first {
			if now[m] {
				k++
			}
		}
		return k
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := n; left() > 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the first %d markers left after 20 s of commits", left(), n)
		}
		commit(i)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStampTakenRetriesAtSameRevision: a commit offers the next
// MaxSpeculation versionstamps, so others' stamp-taking commits that land
// first cost it nothing; when they took all it offered, it runs again at
// its read revision without reading its keys or the counter again; if a
// key it read changed too, it goes on to a newer revision and sees the
// change (no lost update).
func TestStampTakenRetriesAtSameRevision(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	var ranges atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.KV/Range" {
			ranges.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	// The stores trust the counter they learned: others' commits leave
	// it stale.
	s, err := etcd.Open(ctx, etcd.TrustStamps(etcd.Config{Client: cli}, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := etcd.Open(ctx, etcd.TrustStamps(etcd.Config{Endpoints: c.Endpoints()}, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, tc := range []struct {
		name        string
		stamps      int    // stamp-taking commits by another client meanwhile
		otherWrites string // the key they also write
		wantRuns    int
		wantReads   int64 // Range requests of the retried run
		want        int64 // the counter afterwards
	}{
		{"stamp taken, a later one offered", 1, "elsewhere", 1, -1, 2},
		{"every offered stamp taken", etcd.MaxSpeculation, "elsewhere", 2, 0, 2},
		{"stamp and data", 1, "k", 2, -1, 11 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Update(ctx, func(tx kv.Tx) error { tx.ClearRange([]byte(""), nil); return nil }); err != nil {
				t.Fatal(err)
			}
			if err := s.Update(ctx, func(tx kv.Tx) error { tx.Add([]byte("k"), 1); tx.Versionstamp(); return nil }); err != nil {
				t.Fatal(err)
			}
			runs := 0
			var before int64
			err := s.Update(ctx, func(tx kv.Tx) error {
				runs++
				if runs == 2 {
					before = ranges.Load()
				}
				v, err := tx.Get([]byte("k"))
				if err != nil {
					return err
				}
				vs := tx.Versionstamp()
				tx.Set(append([]byte("at/"), vs[:]...), nil)
				if runs == 1 {
					for range tc.stamps {
						err := other.Update(ctx, func(o kv.Tx) error {
							ovs := o.Versionstamp()
							o.Set(append([]byte("other/"), ovs[:]...), nil)
							o.Add([]byte(tc.otherWrites), 10)
							return nil
						})
						if err != nil {
							return err
						}
					}
				}
				if runs == 2 && tc.wantReads >= 0 {
					if got := ranges.Load() - before; got != tc.wantReads {
						t.Errorf("the run at the same revision made %d range requests, want %d", got, tc.wantReads)
					}
				}
				var b [8]byte
				copy(b[:], v)
				binary.LittleEndian.PutUint64(b[:], binary.LittleEndian.Uint64(b[:])+1)
				tx.Set([]byte("k"), b[:])
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if runs != tc.wantRuns {
				t.Errorf("ran %d times, want %d", runs, tc.wantRuns)
			}
			if got := counter(t, s, "k"); got != tc.want {
				t.Errorf("k = %d, want %d", got, tc.want)
			}
			// The stamp in the key is the one the commit took: after
			// every one the other client took.
			mine, theirs := stampKeys(t, s, "at/"), stampKeys(t, s, "other/")
			if len(mine) != 1 || len(theirs) != tc.stamps {
				t.Fatalf("stamped keys: mine %v, theirs %v; want 1 and %d", mine, theirs, tc.stamps)
			}
			if last := theirs[len(theirs)-1]; mine[0].Compare(last) <= 0 {
				t.Errorf("stamp %s not after the other client's %s", mine[0], last)
			}
		})
	}
}

// stampKeys returns the versionstamps that follow prefix in s's keys.
func stampKeys(t *testing.T, s kv.Store, prefix string) []kv.Versionstamp {
	t.Helper()
	var out []kv.Versionstamp
	err := s.View(context.Background(), func(tx kv.ReadTx) error {
		return tx.Range([]byte(prefix), kv.PrefixEnd([]byte(prefix)), kv.RangeOptions{}, func(k, _ []byte) error {
			out = append(out, kv.Versionstamp(k[len(prefix):]))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
