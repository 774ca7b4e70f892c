package jobs

import (
	"context"
	"testing"

	"github.com/couchepi/couchepi/plugin/kv/etcd"
)

// openEtcdQueue opens a queue under prefix on its own etcd client (as
// another process would), closed when t ends.
func openEtcdQueue(t *testing.T, endpoints []string, prefix string, opts Options) *Queue {
	t.Helper()
	s, err := etcd.Open(context.Background(), etcd.Config{Endpoints: endpoints, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(s, opts)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(); s.Close() })
	return q
}
