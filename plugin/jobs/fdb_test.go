//go:build fdb

package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/fdb"
)

// With -tags fdb, every backends() test also runs on FoundationDB, each in a
// fresh random prefix (skipped when FDB_CLUSTER_FILE is not set).
func init() {
	extraBackends = append(extraBackends, extraBackend{name: "fdb", open: func(t *testing.T) kv.Store {
		cluster := os.Getenv("FDB_CLUSTER_FILE")
		if cluster == "" {
			t.Skip("FoundationDB: FDB_CLUSTER_FILE not set; set it to a test cluster's file to run the queue tests on it")
		}
		var p [8]byte
		rand.Read(p[:])
		prefix := []byte("couchepi-jobstest/" + hex.EncodeToString(p[:]) + "/")
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
	}})
}
