package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/hashicorp/go-hclog"
)

// Job records hold the replications' credentials sealed (jobdata.Encode);
// this file decides the keys, checks that every node sharing a queue has
// the one its records are sealed with, seals what older versions stored in
// plaintext, and scrubs the store afterwards. See "Credentials at rest"
// in docs/replicator.md.

// keyFileName is the key file created beside the bolt job store.
const keyFileName = "replicator.key"

// secretLabel sets the key derived from `[chttpd_auth] secret` apart from
// that secret's other uses (cookie signatures).
const secretLabel = "couchepi replicator job records v1"

// previousSecretsKey is the `[replicator]` key listing the secrets
// `[chttpd_auth] secret` had before, comma-separated: their keys open the
// records they sealed, which every start seals again with the current
// one (see "Rotating the secret" in docs/cluster.md).
const previousSecretsKey = "previous_secrets"

// keyring is the keys job records are sealed with, and where the current
// one came from (for logs).
type keyring struct {
	*seal.Keyring
	source string
	// rotating: the keyring holds previous keys (other than the current
	// secret's legacy derivation), so records may be sealed with them.
	rotating bool
}

// loadKeyring reads the keys job records are sealed with. The first key
// of `[replicator] secret_key_file` seals, when it is set. Otherwise a
// bolt store uses the key in replicator.key beside its file, created on
// first use; an etcd store, shared by nodes that all need the key, a key
// derived from `[chttpd_auth] secret` (or `[couch_httpd_auth] secret`),
// which CouchDB's nodes already share, and no key at all, or a secret too
// weak to derive one from (seal.CheckSecret), is an error. Keys used
// before stay in the keyring, so the records they sealed are read and
// sealed again: the key file's other lines, the key derived from the
// secret before a key file was configured, the keys of `[replicator]
// previous_secrets`, and each secret's key as versions before the salt
// derived it (seal.LegacyKeyFromSecret).
func loadKeyring(cfg hooks.Config, sc storeConfig, log hclog.Logger) (keyring, error) {
	var keys []*seal.Key
	var twin *seal.Key // the current secret's key as derived before the salt
	var source string
	if f := strings.TrimSpace(cfg["replicator"]["secret_key_file"]); f != "" {
		ks, err := seal.ReadKeyFile(f)
		if err != nil {
			return keyring{}, fmt.Errorf("[replicator] secret_key_file: %w", err)
		}
		warnIfReadable(f, log)
		keys, source = ks, "secret_key_file "+f
	}
	if sc.kind == "bolt" {
		path := filepath.Join(filepath.Dir(sc.path), keyFileName)
		if keys != nil {
			if own, err := seal.ReadKeyFile(path); err == nil {
				keys = append(keys, own...)
			}
			return newKeyring(keys, source), nil
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return keyring{}, err
		}
		k, created, err := seal.LoadOrCreateKeyFile(path)
		if err != nil {
			return keyring{}, fmt.Errorf("job record key: %w", err)
		}
		if created {
			log.Info("created the key that seals credentials in job records", "path", path, "key", k.ID())
		}
		warnIfReadable(path, log)
		return newKeyring([]*seal.Key{k}, path), nil
	}
	secret, section := cfg["chttpd_auth"]["secret"], "chttpd_auth"
	if secret == "" {
		secret, section = cfg["couch_httpd_auth"]["secret"], "couch_httpd_auth"
	}
	weak := secret != "" && seal.CheckSecret(secret) != nil
	switch {
	case keys == nil && secret == "":
		return keyring{}, errors.New("[replicator] job_store = etcd needs a key every node shares to seal the credentials in job records: " +
			"set [chttpd_auth] secret (or [replicator] secret_key_file) to the same value on every node")
	case keys == nil && weak:
		return keyring{}, fmt.Errorf("[%s] secret, from which the key sealing the credentials in job records is derived, is %w. "+
			"Set a new one on every node; records sealed with the old one open while it is listed in [replicator] %s (see docs/cluster.md)",
			section, seal.ErrWeakSecret, previousSecretsKey)
	case keys == nil:
		keys, source = []*seal.Key{seal.KeyFromSecret(secret, secretLabel)}, "["+section+"] secret"
		twin = seal.LegacyKeyFromSecret(secret, secretLabel)
	case weak:
		// The key file seals; a key derived from a weak secret would let
		// whoever guesses it forge records, so it opens nothing unless
		// listed in previous_secrets.
		log.Warn("["+section+"] secret is too weak to open job records with; list it in [replicator] "+previousSecretsKey+
			" if records were sealed with it before secret_key_file was set", "section", section)
	case secret != "":
		keys = append(keys, seal.KeyFromSecret(secret, secretLabel), seal.LegacyKeyFromSecret(secret, secretLabel))
	}
	for i, prev := range previousSecrets(cfg) {
		if seal.CheckSecret(prev) != nil {
			log.Warn("a previous secret is weak: whoever guesses it can forge job records while it is listed; remove it from [replicator] "+
				previousSecretsKey+" once every node has started with the current one", "position", i+1)
		}
		keys = append(keys, seal.KeyFromSecret(prev, secretLabel), seal.LegacyKeyFromSecret(prev, secretLabel))
	}
	kr := newKeyring(keys, source)
	if twin != nil {
		kr.Keyring = seal.NewKeyring(keys[0], append(keys[1:], twin)...)
	}
	return kr, nil
}

// previousSecrets returns the secrets of `[replicator] previous_secrets`.
func previousSecrets(cfg hooks.Config) []string {
	var out []string
	for _, s := range strings.Split(cfg["replicator"][previousSecretsKey], ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func newKeyring(keys []*seal.Key, source string) keyring {
	return keyring{Keyring: seal.NewKeyring(keys[0], keys[1:]...), source: source, rotating: len(keys) > 1}
}

// warnIfReadable warns when a key file can be read by others than its owner.
func warnIfReadable(path string, log hclog.Logger) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("key file is readable by others than its owner; chmod 600 it", "path", path, "mode", fi.Mode().Perm().String())
	}
}

// errKeyMismatch: the queue's records are sealed with a key this node
// does not hold.
type errKeyMismatch struct {
	queueKey string
	keys     keyring
	shared   bool // the store is shared by nodes (etcd)
}

// Error says what to do without naming keys: it is shown to admins in
// 503 answers, and a key id lets one test guesses of the secret it was
// derived from; sealRecords logs the ids.
func (e errKeyMismatch) Error() string {
	hint := "restore the key file it was created with (replicator.key beside the job store, or [replicator] secret_key_file), " +
		"or remove the job store: the jobs of _replicator docs are made again from the docs, transient ones are lost"
	if e.shared {
		hint = "every node sharing a queue needs the same [replicator] secret_key_file or [chttpd_auth] secret; " +
			"after a change of [chttpd_auth] secret, list the old one in [replicator] " + previousSecretsKey + " (docs/cluster.md)"
	}
	return fmt.Sprintf("the job queue's records are sealed with a key this node does not hold (its current key is from %s): %s",
		e.keys.source, hint)
}

// sealRecords makes every record of the queue sealed with keys' current
// key: it refuses a queue sealed with a key keys lacks, records keys'
// current key as the queue's, and seals again the records that older
// versions stored in plaintext or without a binding (s1), or a previous
// key sealed (on every start while keys holds previous keys: a rotation
// in progress). Once a pass found nothing left to seal, keys refuse
// values of those older formats (seal.Keyring.CloseLegacy): only someone
// without the key could put one in the store since. It returns whether
// the store must then be scrubbed.
func sealRecords(ctx context.Context, q *jobs.Queue, keys keyring, shared bool, log hclog.Logger) (scrub bool, err error) {
	var st jobstore.SealState
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		var err error
		if st, err = jobstore.GetSealState(tx.KV()); err != nil {
			return err
		}
		if st.Key != "" && !keys.Holds(st.Key) {
			log.Error("the job queue's records are sealed with a key this node does not hold", "queue_key", st.Key,
				"keys", strings.Join(keys.IDs(), ","), "current_from", keys.source)
			return errKeyMismatch{st.Key, keys, shared}
		}
		if st.Key != keys.ID() {
			st.Key, st.Done = keys.ID(), false
			jobstore.SetSealState(tx.KV(), st)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	if st.Done && st.Bound && !keys.rotating {
		keys.CloseLegacy()
		return st.Scrub, nil
	}
	start := time.Now()
	resealed, unreadable, err := jobstore.Reseal(ctx, q, keys.Keyring)
	if err != nil {
		return false, fmt.Errorf("seal job records: %w", err)
	}
	if unreadable > 0 {
		log.Error("job records sealed with a key this node does not hold cannot run here", "records", unreadable, "keys", strings.Join(keys.IDs(), ","))
	}
	if resealed > 0 {
		log.Info("sealed job records with the current key", "records", resealed, "key", keys.ID(), "took", time.Since(start).Round(time.Millisecond).String())
	}
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		cur, err := jobstore.GetSealState(tx.KV())
		if err != nil {
			return err
		}
		if cur.Key == keys.ID() { // no other node moved to another key meanwhile
			cur.Done = unreadable == 0
			cur.Bound = cur.Done
		}
		if cur.Done && cur.Bound {
			keys.CloseLegacy()
		}
		cur.Scrub = cur.Scrub || resealed > 0
		scrub = cur.Scrub
		jobstore.SetSealState(tx.KV(), cur)
		return nil
	})
	return scrub, err
}

// scrubDone records that the store was scrubbed.
func scrubDone(ctx context.Context, q *jobs.Queue) error {
	return q.Transact(ctx, func(tx *jobs.Tx) error {
		st, err := jobstore.GetSealState(tx.KV())
		if err != nil || !st.Scrub {
			return err
		}
		st.Scrub = false
		jobstore.SetSealState(tx.KV(), st)
		return nil
	})
}

// scrubEtcd compacts etcd's history, so that the plaintext values of
// resealed records are no longer kept as old revisions, and defragments
// every member, so that their data files no longer hold those bytes in
// free pages. A failed defragmentation (it needs etcd's root role) is
// logged with what the operator should run; the scrub is not retried.
func scrubEtcd(ctx context.Context, s *etcd.Store, log hclog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := s.Compact(ctx); err != nil {
		return err
	}
	if err := s.Defragment(ctx); err != nil {
		log.Warn("could not defragment etcd after sealing job records: its data files may still hold their plaintext until "+
			"`etcdctl defrag` runs on every member (etcd's WAL keeps it until etcd purges old segments)", "error", err)
		return nil
	}
	log.Info("compacted and defragmented etcd after sealing job records (etcd's WAL keeps old entries until etcd purges old segments)")
	return nil
}

// openSealedQueue opens the store and the queue on it, with every record
// sealed with keys' current key (sealRecords) and, after records were
// sealed again, the store scrubbed: a bolt file is rewritten without its
// free pages (closed and opened again), etcd is compacted and
// defragmented. uuid is the server uuid, replaced by the cluster's on a
// shared store.
func openSealedQueue(ctx context.Context, stc storeConfig, keys keyring, uuid *string, log hclog.Logger) (kv.Store, *jobs.Queue, error) {
	for attempt := 0; ; attempt++ {
		store, err := openStore(ctx, stc, log)
		if err != nil {
			return nil, nil, fmt.Errorf("open job store %s: %w", stc, err)
		}
		if stc.kind != "bolt" {
			if *uuid, err = clusterUUID(ctx, store, *uuid); err != nil {
				store.Close()
				return nil, nil, fmt.Errorf("cluster uuid: %w", err)
			}
		}
		// A bolt file is this process's alone (it holds the file lock):
		// its queue renews leases in memory and writes nothing at rest.
		q, err := jobs.New(store, jobs.Options{Logger: log, Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag, Exclusive: stc.kind == "bolt"})
		if err != nil {
			store.Close()
			return nil, nil, err
		}
		scrub, err := sealRecords(ctx, q, keys, stc.kind != "bolt", log)
		if err == nil && scrub {
			switch s, ok := store.(*etcd.Store); {
			case ok:
				if err = scrubEtcd(ctx, s, log); err == nil {
					err = scrubDone(ctx, q)
				}
			case attempt > 0: // the bolt file was rewritten on the previous attempt
				err = scrubDone(ctx, q)
			default:
				q.Close()
				store.Close()
				if err := kv.CompactBolt(stc.path, storeOpenWait); err != nil {
					return nil, nil, fmt.Errorf("rewrite job store %s after sealing its records: %w", stc.path, err)
				}
				log.Info("rewrote the job store without the free pages that held plaintext credentials", "path", stc.path)
				continue
			}
		}
		if err != nil {
			q.Close()
			store.Close()
			return nil, nil, err
		}
		return store, q, nil
	}
}
