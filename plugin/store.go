package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/hashicorp/go-hclog"
)

// storeOpenWait is how long Start keeps trying to open the store: during a
// version swap the old process may still hold its file lock for a moment.
const storeOpenWait = 30 * time.Second

// storePath is where the embedded job store lives: `[replicator] jobs_store`,
// else $COUCHEPI_STATE_DIR/replicator.db, else ./replicator.db.
func storePath(cfg hooks.Config) string {
	if p := cfg["replicator"]["jobs_store"]; p != "" {
		return p
	}
	if d := os.Getenv("COUCHEPI_STATE_DIR"); d != "" {
		return filepath.Join(d, "replicator.db")
	}
	return "replicator.db"
}

// openStore opens the bolt store at path, retrying while another process
// holds its lock, until storeOpenWait or ctx ends.
func openStore(ctx context.Context, path string, log hclog.Logger) (kv.Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	deadline := time.Now().Add(storeOpenWait)
	for {
		st, err := kv.OpenBolt(path, kv.BoltOptions{LockTimeout: 500 * time.Millisecond})
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, kv.ErrLocked) || time.Now().After(deadline) {
			return nil, err
		}
		log.Info("job store locked by another process, waiting", "path", path)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
