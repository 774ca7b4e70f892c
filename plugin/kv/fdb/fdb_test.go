//go:build fdb

package fdb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/fdb"
	"github.com/couchepi/couchepi/plugin/kv/kvtest"
)

// TestFoundationDB runs the conformance suite against a live cluster, each
// test in its own random prefix (cleared afterwards).
func TestFoundationDB(t *testing.T) {
	cluster := os.Getenv("FDB_CLUSTER_FILE")
	if cluster == "" {
		t.Skip("FoundationDB: FDB_CLUSTER_FILE not set; set it to a test cluster's file to run this suite")
	}
	kvtest.Run(t, func(t *testing.T) kv.Store {
		var p [8]byte
		rand.Read(p[:])
		prefix := []byte("couchepi-kvtest/" + hex.EncodeToString(p[:]) + "/")
		s, err := fdb.Open(fdb.Options{ClusterFile: cluster, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c, err := fdb.Open(fdb.Options{ClusterFile: cluster, Prefix: prefix})
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.Update(context.Background(), func(tx kv.Tx) error { tx.ClearRange(nil, nil); return nil })
		})
		return s
	})
}
