package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
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
	// file; 0 = 1s (then Open says the data directory is in use).
	OpenTimeout time.Duration
	// FileCompactMinFree is how many bytes of free pages the file must hold
	// before deleting a database or POST /{db}/_compact copies the live
	// data into a new file that replaces it (file compaction: the only way
	// bbolt gives space back to the filesystem); 0 = 64 MiB, negative =
	// never compact the file.
	FileCompactMinFree int64
	// FileCompactMinFreeRatio is the share of the file that must be free
	// pages too (0 < r <= 1); 0 = 0.5.
	FileCompactMinFreeRatio float64
}

// boltOptions are the bbolt options of the store's file (and of the file
// a compaction writes).
func boltOptions(opts Options) *bolt.Options {
	return &bolt.Options{
		Timeout:         opts.OpenTimeout,
		NoSync:          opts.NoSync,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: 1 << 30,
		// 16 KiB pages: a bulk commit writes a quarter of the pages (one
		// pwrite each) that 4 KiB pages need; ~1.5x the ingest rate.
		// Applies to new files only.
		PageSize: 16 << 10,
	}
}

// allocSize is how much the file grows at a time: fewer grow syncs while
// ingesting.
const allocSize = 64 << 20

// Store holds every database of a server in one bbolt file. It is safe for
// concurrent use.
type Store struct {
	// cur is the open bbolt file. File compaction replaces it: read
	// transactions go through view, which retries on the new file when
	// the old one was closed under it; write transactions go through
	// update, which holds gate for reading (compaction holds it for
	// writing while it swaps the files).
	cur  atomic.Pointer[bolt.DB]
	gate sync.RWMutex
	log  hclog.Logger
	path string
	opts Options

	fc fileCompactor

	mu  sync.Mutex
	dbs map[string]*DB // open handles by name

	// attMu is held for reading while attachment blobs are written and
	// referenced, and for writing while DB.Compact reclaims blobs.
	attMu sync.RWMutex

	w *writer

	counters counters
	updates  dbUpdatesFeed
	policy   policyPointer // how new attachment data is stored

	// staged holds the blobs DB.StageAttachment wrote that no revision
	// may reference yet: compaction leaves them.
	stagedMu sync.Mutex
	staged   map[[8]byte]int
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
	b, err := bolt.Open(path, 0o600, boltOptions(opts))
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, inUseError(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	writeOwner(dir)
	// A compaction that did not finish (the process died before its
	// rename) leaves its partial copy; the store is the old file.
	_ = os.Remove(path + compactSuffix)
	b.AllocSize = allocSize
	upgraded := 0
	if err := b.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketDBs); err != nil {
			return err
		}
		if err := createDBUpdateBuckets(tx); err != nil {
			return err
		}
		upgraded, err = upgradeSizes(tx)
		return err
	}); err != nil {
		b.Close()
		return nil, err
	}
	s := &Store{log: opts.Logger, path: path, opts: opts, dbs: make(map[string]*DB)}
	if err := s.sweepOrphanBlobFiles(b); err != nil {
		b.Close()
		return nil, err
	}
	s.cur.Store(b)
	s.w = startWriter(s, opts.MaxBatchDocs)
	if upgraded > 0 {
		opts.Logger.Info("database sizes recounted", "dbs", upgraded)
	}
	s.log.Debug("store opened", "path", path)
	return s, nil
}

// Path is the store's file path.
func (s *Store) Path() string { return s.path }

// Close waits for queued writes, then closes the file.
func (s *Store) Close() error {
	s.fc.close()
	s.flushDBUpdates()
	s.w.stop()
	s.mu.Lock()
	for _, db := range s.dbs {
		db.markGone()
	}
	s.dbs = map[string]*DB{}
	s.mu.Unlock()
	return s.cur.Load().Close()
}

// view runs fn in a read transaction of the current file.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	for {
		b := s.cur.Load()
		err := b.View(fn)
		if errors.Is(err, berrors.ErrDatabaseNotOpen) && s.cur.Load() != b {
			continue // a compaction replaced the file before fn ran
		}
		return err
	}
}

// update runs fn in a write transaction of the current file.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.cur.Load().Update(fn)
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
	// gate before mu: while a file compaction holds gate, DB lookups
	// (which take mu) must not wait behind a creation.
	s.gate.RLock()
	defer s.gate.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	uuid := newUUID()
	err := s.cur.Load().Update(func(tx *bolt.Tx) error {
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
		if err := putU64(m, metaSizesVersion, sizesVersion); err != nil {
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
	s.gate.RLock() // before mu, as in CreateDB
	defer s.gate.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var uuid string
	err := s.cur.Load().Update(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketDBs).Bucket([]byte(name)); b != nil {
			uuid = string(b.Bucket(bucketMeta).Get(metaUUID))
		}
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
	if uuid != "" {
		// Its attachment files; one a write still under way leaves
		// behind goes at the next Open.
		s.sweepBlobFiles(s.blobDir(uuid), nil)
	}
	s.log.Debug("database deleted", "db", name)
	s.scheduleFileCompaction()
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
	err := s.view(func(tx *bolt.Tx) error {
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
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDBs).ForEachBucket(func(k []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}
