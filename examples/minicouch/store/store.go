package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FileName is the name of the store's file inside the data directory.
const FileName = "minicouch.db"

// Options configure Open.
type Options struct {
	// Logger receives structured logs; nil = hclog.NewNullLogger().
	Logger hclog.Logger
	// NoSync skips fsync on commit. Only for tests and benchmarks: with it
	// an acknowledged write may be lost on a crash.
	NoSync bool
	// MaxBatchDocs bounds how many queued write requests share one commit
	// (group commit); 0 = 256.
	MaxBatchDocs int
	// OpenTimeout is how long Open waits for another process's lock on the
	// file; 0 = 5s.
	OpenTimeout time.Duration
}

// Store holds every database of a server in one bbolt file. It is safe for
// concurrent use.
type Store struct {
	bolt *bolt.DB
	log  hclog.Logger
	path string

	mu  sync.Mutex
	dbs map[string]*DB // open handles by name

	// attMu is held for reading while attachment blobs are written and
	// referenced, and for writing while DB.Compact reclaims blobs.
	attMu sync.RWMutex

	w *writer

	counters counters
	updates  dbUpdatesFeed
	policy   policyPointer // how new attachment data is stored
}

var bucketDBs = []byte("dbs")

// Open opens (creating if needed) the store in dir.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.OpenTimeout == 0 {
		opts.OpenTimeout = time.Second
	}
	if opts.MaxBatchDocs <= 0 {
		opts.MaxBatchDocs = 256
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	b, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         opts.OpenTimeout,
		NoSync:          opts.NoSync,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: 1 << 30,
		// 16 KiB pages: a bulk commit writes a quarter of the pages (one
		// pwrite each) that 4 KiB pages need; ~1.5x the ingest rate.
		// Applies to new files only.
		PageSize: 16 << 10,
	})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, inUseError(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	writeOwner(dir)
	b.AllocSize = 64 << 20 // grow the file in large steps: fewer grow syncs while ingesting
	if err := b.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketDBs); err != nil {
			return err
		}
		return createDBUpdateBuckets(tx)
	}); err != nil {
		b.Close()
		return nil, err
	}
	s := &Store{bolt: b, log: opts.Logger, path: path, dbs: make(map[string]*DB)}
	s.w = startWriter(s, opts.MaxBatchDocs)
	s.log.Debug("store opened", "path", path)
	return s, nil
}

// Path is the store's file path.
func (s *Store) Path() string { return s.path }

// Close waits for queued writes, then closes the file.
func (s *Store) Close() error {
	s.flushDBUpdates()
	s.w.stop()
	s.mu.Lock()
	for _, db := range s.dbs {
		db.markGone()
	}
	s.dbs = map[string]*DB{}
	s.mu.Unlock()
	return s.bolt.Close()
}

// newUUID returns 32 random hex digits.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CreateDB creates database name (already validated by the caller) with a
// fresh uuid. It returns ErrDBExists if it exists.
func (s *Store) CreateDB(name string) (*DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uuid := newUUID()
	err := s.bolt.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketDBs)
		if root.Bucket([]byte(name)) != nil {
			return ErrDBExists
		}
		b, err := root.CreateBucket([]byte(name))
		if err != nil {
			return err
		}
		for _, sub := range subBuckets {
			if _, err := b.CreateBucket(sub); err != nil {
				return err
			}
		}
		m := b.Bucket(bucketMeta)
		if err := m.Put(metaUUID, []byte(uuid)); err != nil {
			return err
		}
		if err := m.Put(metaRevsLimit, u64(defaultRevsLimit)); err != nil {
			return err
		}
		s.updates.forget(name)
		return recordDBUpdate(tx, name, 0)
	})
	if err != nil {
		return nil, err
	}
	s.updates.wake()
	if old := s.dbs[name]; old != nil {
		old.markGone()
	}
	db := newDB(s, name, uuid, 0, defaultRevsLimit)
	s.dbs[name] = db
	s.log.Debug("database created", "db", name)
	return db, nil
}

// DeleteDB deletes database name and all its documents and attachments.
// It returns ErrDBNotFound if it does not exist.
func (s *Store) DeleteDB(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.bolt.Update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketDBs).DeleteBucket([]byte(name))
		if errors.Is(err, berrors.ErrBucketNotFound) {
			return ErrDBNotFound
		}
		if err != nil {
			return err
		}
		s.updates.forget(name)
		return recordDBUpdate(tx, name, 2)
	})
	if err != nil {
		return err
	}
	s.updates.wake()
	if db := s.dbs[name]; db != nil {
		db.markGone()
		delete(s.dbs, name)
	}
	s.log.Debug("database deleted", "db", name)
	return nil
}

// DB returns a handle to database name, or ErrDBNotFound. Handles are
// shared; one whose database was deleted answers ErrDBNotFound.
func (s *Store) DB(name string) (*DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if db := s.dbs[name]; db != nil {
		return db, nil
	}
	var uuid string
	var seq, limit uint64
	err := s.bolt.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDBs).Bucket([]byte(name))
		if b == nil {
			return ErrDBNotFound
		}
		m := b.Bucket(bucketMeta)
		uuid = string(m.Get(metaUUID))
		seq = getU64(m, metaSeq)
		limit = getU64(m, metaRevsLimit)
		return nil
	})
	if err != nil {
		return nil, err
	}
	db := newDB(s, name, uuid, seq, int(limit))
	s.dbs[name] = db
	return db, nil
}

// Exists reports whether database name exists.
func (s *Store) Exists(name string) bool {
	_, err := s.DB(name)
	return err == nil
}

// ListDBs returns the names of all databases, sorted by byte order.
func (s *Store) ListDBs() ([]string, error) {
	var out []string
	err := s.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDBs).ForEachBucket(func(k []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}
