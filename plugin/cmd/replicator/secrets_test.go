package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	"github.com/couchepi/couchepi/sdk"
	"github.com/hashicorp/go-hclog"
)

// writeKeyFile writes a key file of n keys and returns its path and keys.
func writeKeyFile(t *testing.T, n int) (string, []*seal.Key) {
	t.Helper()
	var text strings.Builder
	var out []*seal.Key
	for range n {
		m := make([]byte, seal.KeySize)
		for i := range m {
			m[i] = byte(len(out)*31 + i + 1)
		}
		k, _ := seal.NewKey(m)
		out = append(out, k)
		text.WriteString(hex.EncodeToString(m) + "\n")
	}
	path := filepath.Join(t.TempDir(), "shared.key")
	if err := os.WriteFile(path, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, out
}

// Secrets as strong as CouchDB makes them (32 hex digits).
const (
	clusterSecret = "6b1f0e9d2c8a47f3a5e4d3c2b1a09f8e"
	newSecret     = "0f9e8d7c6b5a49382716a5b4c3d2e1f0"
)

// TestLoadKeyring (issue 38 items 5, 6): where the keys come from; a
// weak secret is refused when a key is derived from it; previous secrets
// open the records they sealed.
func TestLoadKeyring(t *testing.T) {
	log := hclog.NewNullLogger()
	keyFile, fileKeys := writeKeyFile(t, 2)
	derived := seal.KeyFromSecret(clusterSecret, secretLabel)
	unsalted := seal.LegacyKeyFromSecret(clusterSecret, secretLabel)
	fresh := seal.KeyFromSecret(newSecret, secretLabel)
	weak := seal.KeyFromSecret("short", secretLabel)
	etcdStore := storeConfig{kind: "etcd"}
	for _, tc := range []struct {
		name    string
		cfg     hooks.Config
		sc      func(dir string) storeConfig
		current string
		holds   []string
		lacks   []string
		err     string
	}{
		{name: "etcd: key file", cfg: hooks.Config{"replicator": {"secret_key_file": keyFile}},
			current: fileKeys[0].ID(), holds: []string{fileKeys[1].ID()}},
		{name: "etcd: chttpd_auth secret", cfg: hooks.Config{"chttpd_auth": {"secret": clusterSecret}},
			current: derived.ID(), holds: []string{unsalted.ID()}},
		{name: "etcd: couch_httpd_auth secret", cfg: hooks.Config{"couch_httpd_auth": {"secret": clusterSecret}},
			current: derived.ID()},
		{name: "etcd: key file, and the secret used before it", cfg: hooks.Config{"replicator": {"secret_key_file": keyFile}, "chttpd_auth": {"secret": clusterSecret}},
			current: fileKeys[0].ID(), holds: []string{derived.ID(), unsalted.ID()}},
		{name: "etcd: no key", cfg: hooks.Config{}, err: "needs a key every node shares"},
		{name: "etcd: one-character secret", cfg: hooks.Config{"chttpd_auth": {"secret": "x"}}, err: "openssl rand -hex 32"},
		{name: "etcd: 31-character secret", cfg: hooks.Config{"chttpd_auth": {"secret": clusterSecret[:31]}}, err: "at least 32"},
		{name: "etcd: key file, a weak secret opens nothing", cfg: hooks.Config{"replicator": {"secret_key_file": keyFile}, "chttpd_auth": {"secret": "short"}},
			current: fileKeys[0].ID(), lacks: []string{weak.ID()}},
		{name: "etcd: rotated secret, the old one previous", cfg: hooks.Config{"chttpd_auth": {"secret": newSecret},
			"replicator": {"previous_secrets": " " + clusterSecret + " , short"}},
			current: fresh.ID(), holds: []string{derived.ID(), unsalted.ID(), weak.ID()}},
		{name: "etcd: weak secret, a strong one previous", cfg: hooks.Config{"chttpd_auth": {"secret": "short"},
			"replicator": {"previous_secrets": clusterSecret}}, err: "previous_secrets"},
		{name: "bad key file", cfg: hooks.Config{"replicator": {"secret_key_file": filepath.Join(t.TempDir(), "missing")}}, err: "secret_key_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := loadKeyring(tc.cfg, etcdStore, log)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if keys.ID() != tc.current {
				t.Errorf("current key %s, want %s", keys.ID(), tc.current)
			}
			for _, id := range tc.holds {
				if !keys.Holds(id) {
					t.Errorf("keyring lacks %s", id)
				}
			}
			for _, id := range tc.lacks {
				if keys.Holds(id) {
					t.Errorf("keyring holds %s", id)
				}
			}
		})
	}
	t.Run("bolt: a key created beside the store", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		sc := storeConfig{kind: "bolt", path: filepath.Join(dir, "replicator.db")}
		// [chttpd_auth] secret is per node: a bolt store does not use it.
		cfg := hooks.Config{"chttpd_auth": {"secret": clusterSecret}}
		first, err := loadKeyring(cfg, sc, log)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, keyFileName))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v %v", fi, err)
		}
		again, err := loadKeyring(cfg, sc, log)
		if err != nil || again.ID() != first.ID() || first.ID() == derived.ID() {
			t.Fatalf("second start: key %s (first %s), %v", again.ID(), first.ID(), err)
		}
		// Configuring a key file later keeps the created key for reading.
		withFile, err := loadKeyring(hooks.Config{"replicator": {"secret_key_file": keyFile}}, sc, log)
		if err != nil || withFile.ID() != fileKeys[0].ID() || !withFile.Holds(first.ID()) {
			t.Fatalf("with a key file: current %s, holds the created key %v, %v", withFile.ID(), withFile.Holds(first.ID()), err)
		}
	})
}

// legacyRep is a replication whose credential older versions stored in
// plaintext.
func legacyRep(secret string) *parse.Rep {
	return &parse.Rep{
		Source: parse.Endpoint{URL: "http://h/src/", Auth: &parse.BasicAuth{Username: "u", Password: secret}},
		Target: parse.Endpoint{URL: "http://h/tgt/", Headers: map[string]string{"X-Token": secret}},
	}
}

// addLegacy writes records as versions before sealing did (the record's
// plain JSON), several times each, and records of jobs since removed (of
// deleted docs, 50 KB each), so that the store's history and free pages
// hold them too.
func addLegacy(t *testing.T, q *jobs.Queue, secret string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	add := func(id string, rec *jobdata.Record) {
		t.Helper()
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Add(ctx, jobdata.JobType, id, data, jobstore.AddedTime()); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 3; round++ {
		for _, id := range ids {
			add(id, jobdata.New(legacyRep(secret), "_replicator", "u1", id, time.Unix(int64(round), 0)))
		}
	}
	for i := 0; i < 10; i++ {
		id := "deleted-" + strconv.Itoa(i)
		rep := legacyRep(secret)
		rep.Selector = json.RawMessage(`{"pad":"` + strings.Repeat("p", 50<<10) + `"}`)
		add(id, jobdata.New(rep, "_replicator", "u1", id, time.Unix(0, 0)))
		if err := q.Remove(ctx, jobdata.JobType, id); err != nil {
			t.Fatal(err)
		}
	}
}

func newQueue(t *testing.T, s kv.Store) *jobs.Queue {
	t.Helper()
	q, err := jobs.New(s, jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func sealState(t *testing.T, q *jobs.Queue) jobstore.SealState {
	t.Helper()
	var st jobstore.SealState
	err := q.Transact(context.Background(), func(tx *jobs.Tx) error {
		var err error
		st, err = jobstore.GetSealState(tx.KV())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSealRecords: a node refuses a queue sealed with a key it lacks;
// with the queue's key as its previous one, it seals every record with
// its own and the queue's key becomes its; records are sealed again
// only when there is something to seal.
func TestSealRecords(t *testing.T) {
	ctx := context.Background()
	log := hclog.NewNullLogger()
	q := newQueue(t, kv.NewMemory())
	defer q.Close()
	addLegacy(t, q, "legacy-secret", "a", "b")
	a, b := seal.RandomKey(), seal.RandomKey()
	ringA := keyring{seal.NewKeyring(a), "test A", false}
	ringB := keyring{seal.NewKeyring(b), "test B", false}
	rotating := keyring{seal.NewKeyring(b, a), "test B, A", true}

	scrub, err := sealRecords(ctx, q, ringA, true, log)
	if err != nil || !scrub {
		t.Fatalf("first start: scrub %v, %v; want the legacy records sealed and a scrub", scrub, err)
	}
	if st := sealState(t, q); st != (jobstore.SealState{Key: a.ID(), Done: true, Bound: true, Scrub: true}) {
		t.Fatalf("state %+v", st)
	}
	if !ringA.LegacyClosed() {
		t.Error("every record sealed bound, and the keyring still opens s1 and plaintext records")
	}
	if err := scrubDone(ctx, q); err != nil {
		t.Fatal(err)
	}
	if scrub, err := sealRecords(ctx, q, ringA, true, log); err != nil || scrub {
		t.Fatalf("restart with the same key: scrub %v, %v", scrub, err)
	}
	_, err = sealRecords(ctx, q, ringB, true, log)
	var mismatch errKeyMismatch
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "secret_key_file") || !strings.Contains(err.Error(), "previous_secrets") {
		t.Fatalf("a node without the queue's key: %v", err)
	}
	// The error reaches clients (503 reasons): it names no key (issue 38
	// item 5), the log does.
	for _, k := range []*seal.Key{a, b} {
		if strings.Contains(err.Error(), k.ID()) {
			t.Errorf("the error names key %s: %v", k.ID(), err)
		}
	}
	if _, err := sealRecords(ctx, q, ringB, false, log); !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "remove the job store") {
		t.Fatalf("a single node without its store's key: %v", err)
	}
	if scrub, err := sealRecords(ctx, q, rotating, true, log); err != nil || !scrub {
		t.Fatalf("rotation: scrub %v, %v", scrub, err)
	}
	if st := sealState(t, q); st.Key != b.ID() || !st.Done {
		t.Fatalf("after rotation: %+v", st)
	}
	recs := jobstore.Records{Q: q, Keys: ringB.Keyring}
	for _, id := range []string{"a", "b"} {
		rec, err := recs.Get(ctx, id)
		if err != nil || rec.Rep.Source.Auth.Password != "legacy-secret" {
			t.Fatalf("%s with the new key alone: %+v, %v", id, rec, err)
		}
	}
	if _, err := sealRecords(ctx, q, ringA, true, log); !errors.As(err, &mismatch) {
		t.Fatalf("a node left with the old key only: %v", err)
	}
}

// TestOpenSealedQueueBolt (issue 30 item 12): a bolt store written by a
// version that kept credentials in plaintext holds none of them once the
// queue is opened: records are sealed and the file is rewritten without
// the free pages that kept the old values.
func TestOpenSealedQueueBolt(t *testing.T) {
	ctx := context.Background()
	log := hclog.NewNullLogger()
	dir := t.TempDir()
	sc := storeConfig{kind: "bolt", path: filepath.Join(dir, "replicator.db")}
	secret := "bolt-legacy-3e1f0c"
	old, err := kv.OpenBolt(sc.path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue(t, old)
	addLegacy(t, q, secret, "j1", "j2")
	q.Close()
	old.Close()
	count := func() int {
		b, err := os.ReadFile(sc.path)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte(secret))
	}
	if count() == 0 {
		t.Fatal("the legacy store does not hold the secret: the test shows nothing")
	}
	keys, err := loadKeyring(hooks.Config{}, sc, log)
	if err != nil {
		t.Fatal(err)
	}
	uuid := "own"
	store, q, err := openSealedQueue(ctx, sc, keys, &uuid, log)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("the store holds the secret %d times after opening", n)
	}
	if st := sealState(t, q); st != (jobstore.SealState{Key: keys.ID(), Done: true, Bound: true}) {
		t.Errorf("state %+v, want sealed and scrubbed", st)
	}
	recs := jobstore.Records{Q: q, Keys: keys.Keyring}
	for _, id := range []string{"j1", "j2"} {
		if rec, err := recs.Get(ctx, id); err != nil || rec.Rep.Target.Headers["X-Token"] != secret {
			t.Errorf("%s: %+v, %v", id, rec, err)
		}
	}
	q.Close()
	store.Close()
}

// TestOpenSealedQueueEtcd (issue 30 item 12): the same on etcd: once a
// node opened a queue written in plaintext, etcd's data files hold none of
// the credentials (its history is compacted and every member
// defragmented; its WAL keeps old entries until etcd purges them).
func TestOpenSealedQueueEtcd(t *testing.T) {
	ctx := context.Background()
	log := hclog.NewNullLogger()
	c := etcdtest.StartCluster(t, 3)
	sc := storeConfig{kind: "etcd", etcd: etcd.Config{Endpoints: c.Endpoints(), Prefix: "legacy/", CompactInterval: -1}}
	secret := "etcd-legacy-9b27d4"
	old, err := etcd.Open(ctx, sc.etcd)
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue(t, old)
	addLegacy(t, q, secret, "j1", "j2")
	q.Close()
	old.Close()
	dbs := func() (n int) {
		for _, dir := range c.DataDirs() {
			b, err := os.ReadFile(filepath.Join(dir, "member", "snap", "db"))
			if err != nil {
				t.Fatal(err)
			}
			n += bytes.Count(b, []byte(secret))
		}
		return n
	}
	// etcd writes its data file every 100 ms.
	deadline := time.Now().Add(10 * time.Second)
	for dbs() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("etcd's data files do not hold the legacy secret: the test shows nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	keys, err := loadKeyring(hooks.Config{"chttpd_auth": {"secret": clusterSecret}}, sc, log)
	if err != nil {
		t.Fatal(err)
	}
	uuid := "own"
	store, q, err := openSealedQueue(ctx, sc, keys, &uuid, log)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	defer q.Close()
	if n := dbs(); n != 0 {
		t.Errorf("etcd's data files hold the secret %d times after opening", n)
	}
	if st := sealState(t, q); st != (jobstore.SealState{Key: keys.ID(), Done: true, Bound: true}) {
		t.Errorf("state %+v, want sealed and scrubbed", st)
	}
	recs := jobstore.Records{Q: q, Keys: keys.Keyring}
	if rec, err := recs.Get(ctx, "j2"); err != nil || rec.Rep.Source.Auth.Password != secret {
		t.Errorf("j2: %+v, %v", rec, err)
	}
}

// TestStartErrorNamesNoKey (issue 38 item 5): a node that could not start
// because it lacks the queue's key answers 503 without naming any key
// (a key id lets a client test guesses of the secret offline), and tells
// why only to admins.
func TestStartErrorNamesNoKey(t *testing.T) {
	queueKey, own := seal.KeyFromSecret(clusterSecret, secretLabel), seal.KeyFromSecret(newSecret, secretLabel)
	p := newReplicator(hclog.NewNullLogger())
	p.startErr = errKeyMismatch{queueKey.ID(), keyring{seal.NewKeyring(own), "[chttpd_auth] secret", false}, true}
	for _, tc := range []struct {
		name string
		user hooks.UserCtx
		why  bool
	}{
		{"anonymous", hooks.UserCtx{}, false},
		{"user", hooks.UserCtx{Name: "bob", Roles: []string{"r"}}, false},
		{"admin", hooks.UserCtx{Name: "adm", Roles: []string{"_admin"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/_scheduler/jobs", "/_scheduler/docs", "/_replicate"} {
				r := httptest.NewRequest("GET", path, nil).WithContext(sdk.WithUser(context.Background(), tc.user))
				w := httptest.NewRecorder()
				p.ServeHTTP(w, r)
				body := w.Body.String()
				if w.Code != 503 {
					t.Fatalf("%s: %d %s", path, w.Code, body)
				}
				for _, id := range []string{queueKey.ID(), own.ID()} {
					if strings.Contains(body, id) {
						t.Errorf("%s: the answer names key %s: %s", path, id, body)
					}
				}
				if got := strings.Contains(body, "does not hold"); got != tc.why {
					t.Errorf("%s: says why %v, want %v: %s", path, got, tc.why, body)
				}
			}
		})
	}
}
