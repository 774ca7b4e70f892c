package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/hashicorp/go-hclog"
)

// storeOpenWait is how long Start keeps trying to open the store: during a
// version swap the old process may still hold its file lock for a moment.
const storeOpenWait = 30 * time.Second

// storeConfig says where the job queue lives: `[replicator] job_store` is
// "bolt" (default: an embedded file, one owner process) or "etcd" (shared
// by every node pointed at the same etcd and prefix).
type storeConfig struct {
	kind string // "bolt" or "etcd"
	path string // bolt: the file
	etcd etcd.Config
}

// readStoreConfig reads `[replicator] job_store` and `jobs_store` and the
// `[etcd]` section.
func readStoreConfig(cfg hooks.Config) (storeConfig, error) {
	sc := storeConfig{kind: strings.TrimSpace(cfg["replicator"]["job_store"]), path: storePath(cfg)}
	switch sc.kind {
	case "", "bolt":
		sc.kind = "bolt"
		return sc, nil
	case "etcd":
	default:
		return sc, fmt.Errorf("[replicator] job_store = %q: want bolt or etcd", sc.kind)
	}
	e := cfg["etcd"]
	for _, ep := range strings.Split(e["endpoints"], ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			sc.etcd.Endpoints = append(sc.etcd.Endpoints, ep)
		}
	}
	if len(sc.etcd.Endpoints) == 0 {
		return sc, errors.New("[replicator] job_store = etcd needs [etcd] endpoints")
	}
	sc.etcd.Prefix = e["prefix"]
	sc.etcd.Username, sc.etcd.Password = e["username"], e["password"]
	sc.etcd.CertFile, sc.etcd.KeyFile, sc.etcd.CAFile = e["cert_file"], e["key_file"], e["ca_file"]
	if v := strings.TrimSpace(e["compact_interval_sec"]); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return sc, fmt.Errorf("[etcd] compact_interval_sec = %q: want a number of seconds, 0 for never", v)
		}
		sc.etcd.CompactInterval = time.Duration(n) * time.Second
		if n == 0 {
			sc.etcd.CompactInterval = -1
		}
	}
	return sc, nil
}

// String describes the store for logs, without credentials.
func (sc storeConfig) String() string {
	if sc.kind == "etcd" {
		prefix := sc.etcd.Prefix
		if prefix == "" {
			prefix = etcd.DefaultPrefix
		}
		return fmt.Sprintf("etcd %s prefix %q", strings.Join(sc.etcd.Endpoints, ","), prefix)
	}
	return "bolt " + sc.path
}

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

// openStore opens the configured store. A bolt file locked by another
// process is retried for storeOpenWait; an etcd that cannot be reached is
// retried until ctx ends, logging each attempt, so a node started while
// etcd is down comes up when etcd does.
func openStore(ctx context.Context, sc storeConfig, log hclog.Logger) (kv.Store, error) {
	if sc.kind == "etcd" {
		sc.etcd.Logger = log.Named("etcd")
		for attempt := 1; ; attempt++ {
			st, err := etcd.Open(ctx, sc.etcd)
			if err == nil {
				return st, nil
			}
			log.Warn("etcd job store unreachable; retrying", "store", sc.String(), "attempt", attempt, "error", err)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(min(time.Duration(attempt)*time.Second, 10*time.Second)):
			}
		}
	}
	path := sc.path
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

// nodeTypes are CouchDB 4.x's node types: an api_frontend node turns docs
// and _replicate bodies into jobs and serves _scheduler/* for the whole
// queue; a replication node runs jobs. Both default to true; `[node_types]`
// in the ini sets them (the server maps COUCHDB_NODE_TYPE_* there), and any
// value but "false" means true.
type nodeTypes struct{ apiFrontend, replication bool }

func readNodeTypes(cfg hooks.Config) nodeTypes {
	nt := cfg["node_types"]
	return nodeTypes{
		apiFrontend: strings.TrimSpace(nt["api_frontend"]) != "false",
		replication: strings.TrimSpace(nt["replication"]) != "false",
	}
}

// clusterUUIDKey holds, in a shared store, the server uuid every node uses
// in replication ids (outside the queue's key prefix).
var clusterUUIDKey = []byte("cluster_uuid")

// clusterUUID returns the server uuid replication ids are computed with.
// CouchDB computes them with the server's uuid, which all nodes of a
// cluster share; nodes sharing a queue on etcd have their own uuids, so the
// first node to start records its own and every node uses that one. A job
// that moves to another node thus keeps its replication id, and with it
// its checkpoints.
func clusterUUID(ctx context.Context, store kv.Store, own string) (string, error) {
	var uuid string
	err := store.Update(ctx, func(tx kv.Tx) error {
		v, err := tx.Get(clusterUUIDKey)
		if err != nil {
			return err
		}
		if v == nil {
			tx.Set(clusterUUIDKey, []byte(own))
			uuid = own
			return nil
		}
		uuid = string(v)
		return nil
	})
	return uuid, err
}
