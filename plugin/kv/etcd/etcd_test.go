package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	"github.com/couchepi/couchepi/plugin/kv/kvtest"
)

// open returns a store on a fresh prefix of the given endpoints, so the
// conformance subtests share one etcd but never each other's keys.
func open(endpoints []string) func(t *testing.T) kv.Store {
	n := 0
	return func(t *testing.T) kv.Store {
		n++
		s, err := etcd.Open(t.Context(), etcd.Config{
			Endpoints:     endpoints,
			Prefix:        t.Name() + "/",
			CleanInterval: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// TestEmbeddedCluster runs the conformance suite on a 3-member embedded etcd.
func TestEmbeddedCluster(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	kvtest.Run(t, open(c.Endpoints()))
}

// TestBinary runs the conformance suite on Debian's etcd-server (3.4).
func TestBinary(t *testing.T) {
	b := etcdtest.StartBinary(t)
	t.Logf("etcd binary: %s", etcdtest.Version(etcdtest.BinaryPath()))
	kvtest.Run(t, open([]string{b.Endpoint()}))
}

// TestTooLarge: a commit larger than etcd takes fails at once with
// kv.ErrTooLarge, whether etcd refuses it (over --max-request-bytes,
// 1.5 MiB) or the client will not send it (over gRPC's 2 MiB), rather
// than being taken for a commit whose outcome is unknown and retried.
func TestTooLarge(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	s := open(c.Endpoints())(t)
	defer s.Close()
	for _, size := range []int{1800 << 10, 3 << 20} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := s.Update(ctx, func(tx kv.Tx) error {
			for i := 0; i < size/(64<<10); i++ {
				tx.Set([]byte(fmt.Sprintf("k%03d", i)), make([]byte, 64<<10))
			}
			return nil
		})
		cancel()
		if !errors.Is(err, kv.ErrTooLarge) {
			t.Errorf("commit of %d KiB: %v, want kv.ErrTooLarge", size>>10, err)
		}
	}
	if err := s.Update(t.Context(), func(tx kv.Tx) error { tx.Set([]byte("small"), []byte("ok")); return nil }); err != nil {
		t.Errorf("a small commit after them: %v", err)
	}
}

// TestCloseEndsWatches: Close returns only once every goroutine the store
// started has returned: each pending watch has fired (its channel closed),
// and Watch afterwards fails with kv.ErrClosed. The store is on a client
// it does not own, so Close does no network round trip that would give the
// watches' goroutines time to end anyway.
func TestCloseEndsWatches(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	cli := faultyClient(t, c.Endpoints(), func() string { return "" })
	for round := 0; round < 5; round++ {
		s, err := etcd.Open(t.Context(), etcd.Config{Client: cli, Prefix: fmt.Sprintf("%s/%d/", t.Name(), round)})
		if err != nil {
			t.Fatal(err)
		}
		var watches []<-chan struct{}
		for i := 0; i < 256; i++ {
			w, err := s.Watch(t.Context(), []byte(fmt.Sprintf("w%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			watches = append(watches, w)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for i, w := range watches {
			select {
			case <-w:
			default:
				t.Fatalf("round %d: watch %d still pending after Close returned", round, i)
			}
		}
		if _, err := s.Watch(t.Context(), []byte("late")); !errors.Is(err, kv.ErrClosed) {
			t.Fatalf("Watch after Close: %v, want kv.ErrClosed", err)
		}
	}
}
