package etcd_test

import (
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
