package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

const defaultRevsLimit = 1000

var (
	bucketMeta  = []byte("meta")
	bucketDocs  = []byte("docs")
	bucketSeqs  = []byte("seqs")
	bucketRevs  = []byte("revs")
	bucketLocal = []byte("local")
	bucketAtts  = []byte("atts")
	bucketBlobs = []byte("blobs")
	subBuckets  = [][]byte{bucketMeta, bucketDocs, bucketSeqs, bucketRevs, bucketLocal, bucketAtts, bucketBlobs}

	metaUUID      = []byte("uuid")
	metaSeq       = []byte("update_seq")
	metaDocCount  = []byte("doc_count")
	metaDelCount  = []byte("doc_del_count")
	metaPurgeSeq  = []byte("purge_seq")
	metaSecurity  = []byte("security")
	metaRevsLimit = []byte("revs_limit")
	// The sizes (sizes.go): the file's bytes of the database, and the
	// live ones, stored and external; and the rules they were kept by.
	metaFile         = []byte("file")
	metaActive       = []byte("active")
	metaExternal     = []byte("external")
	metaSizesVersion = []byte("sizes_version")
)

// DB is a handle to one database. It is safe for concurrent use.
type DB struct {
	s    *Store
	name string
	key  []byte
	uuid string

	seq       atomic.Uint64
	revsLimit atomic.Int64
	gone      atomic.Bool

	mu     sync.Mutex
	notify chan struct{} // closed and replaced when seq advances or the db goes
}

func newDB(s *Store, name, uuid string, seq uint64, revsLimit int) *DB {
	if revsLimit <= 0 {
		revsLimit = defaultRevsLimit
	}
	db := &DB{s: s, name: name, key: []byte(name), uuid: uuid, notify: make(chan struct{})}
	db.seq.Store(seq)
	db.revsLimit.Store(int64(revsLimit))
	return db
}

// Name is the database's name.
func (db *DB) Name() string { return db.name }

// UUID is the database's uuid (32 hex digits, new on every creation).
func (db *DB) UUID() string { return db.uuid }

// UpdateSeq is the database's current update sequence.
func (db *DB) UpdateSeq() uint64 { return db.seq.Load() }

// RevsLimit is the database's revs_limit.
func (db *DB) RevsLimit() int { return int(db.revsLimit.Load()) }

func (db *DB) markGone() {
	db.gone.Store(true)
	db.wake()
}

// wake releases every Wait.
func (db *DB) wake() {
	db.mu.Lock()
	close(db.notify)
	db.notify = make(chan struct{})
	db.mu.Unlock()
}

// advance records a committed update sequence and wakes waiters.
func (db *DB) advance(seq uint64) {
	for {
		cur := db.seq.Load()
		if seq <= cur {
			return
		}
		if db.seq.CompareAndSwap(cur, seq) {
			db.wake()
			db.s.updates.wake()
			return
		}
	}
}

// Wait blocks until the update sequence exceeds after, the context ends or
// the database is deleted (ErrDBNotFound), and returns the current sequence.
func (db *DB) Wait(ctx context.Context, after uint64) (uint64, error) {
	for {
		db.mu.Lock()
		ch := db.notify
		db.mu.Unlock()
		if db.gone.Load() {
			return db.seq.Load(), ErrDBNotFound
		}
		if s := db.seq.Load(); s > after {
			return s, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return db.seq.Load(), ctx.Err()
		}
	}
}

// bucket returns the database's bucket in tx, or ErrDBNotFound when it was
// deleted (or deleted and re-created) since the handle was made.
func (db *DB) bucket(tx *bolt.Tx) (*bolt.Bucket, error) {
	if db.gone.Load() {
		return nil, ErrDBNotFound
	}
	b := tx.Bucket(bucketDBs).Bucket(db.key)
	if b == nil || string(b.Bucket(bucketMeta).Get(metaUUID)) != db.uuid {
		return nil, ErrDBNotFound
	}
	if tx.Writable() {
		setFill(b)
	}
	return b, nil
}

// Fill factors of a database's buckets in write transactions. bbolt splits
// a page at FillPercent (default 0.5), so pages were left about half full
// (a 16 KiB page took ~7 revision bodies of 1 KB instead of ~13), and every
// commit wrote (pwrite) and later freed nearly twice the pages the data
// needs. The seqs bucket only ever gets keys above all
// others (new update seqs), the classic append-only case for a full split;
// docs and revs get keys anywhere, but bbolt rewrites every touched page at
// commit anyway, so fuller pages mean fewer pages to write, not more work.
const (
	fillSeqs = 1.0
	fillDocs = 0.9
)

// setFill sets the fill factors of b's sub-buckets for this transaction
// (bbolt keeps a writable transaction's bucket handles, so it sticks).
func setFill(b *bolt.Bucket) {
	if s := b.Bucket(bucketSeqs); s != nil {
		s.FillPercent = fillSeqs
	}
	for _, name := range [][]byte{bucketDocs, bucketRevs} {
		if c := b.Bucket(name); c != nil {
			c.FillPercent = fillDocs
		}
	}
}

// view runs fn in a read transaction on the database's bucket.
func (db *DB) view(fn func(b *bolt.Bucket) error) error {
	return db.s.view(func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		return fn(b)
	})
}

// Info returns the database's info.
func (db *DB) Info(ctx context.Context) (DBInfo, error) {
	info := DBInfo{DBName: db.name, UUID: db.uuid, InstanceStartTime: "0"}
	err := db.view(func(b *bolt.Bucket) error {
		m := b.Bucket(bucketMeta)
		info.DocCount = getU64(m, metaDocCount)
		info.DocDelCount = getU64(m, metaDelCount)
		info.UpdateSeq = getU64(m, metaSeq)
		info.PurgeSeq = getU64(m, metaPurgeSeq)
		active := int64(getU64(m, metaActive))
		// Attachment data is stored once per database, counted once per
		// document (as CouchDB, which stores it once per document): docs
		// sharing data can make active pass the bytes stored.
		info.Sizes = Sizes{File: max(int64(getU64(m, metaFile)), active), Active: active, External: int64(getU64(m, metaExternal))}
		return nil
	})
	return info, err
}

// Security returns the database's _security object ("{}" if never set).
func (db *DB) Security(ctx context.Context) (json.RawMessage, error) {
	var sec json.RawMessage
	err := db.view(func(b *bolt.Bucket) error {
		if v := b.Bucket(bucketMeta).Get(metaSecurity); v != nil {
			sec = append(json.RawMessage(nil), v...)
		} else {
			sec = json.RawMessage("{}")
		}
		return nil
	})
	return sec, err
}

// SetSecurity stores the database's _security object (a JSON object,
// validated by the caller).
func (db *DB) SetSecurity(ctx context.Context, sec json.RawMessage) error {
	return db.s.w.do(ctx, func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		return b.Bucket(bucketMeta).Put(metaSecurity, append([]byte(nil), sec...))
	})
}

// SetRevsLimit sets the database's revs_limit (n >= 1); documents are
// stemmed to it on their next write.
func (db *DB) SetRevsLimit(ctx context.Context, n int) error {
	if n < 1 {
		return BadRequest("revs_limit must be positive")
	}
	err := db.s.w.do(ctx, func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		return b.Bucket(bucketMeta).Put(metaRevsLimit, u64(uint64(n)))
	})
	if err == nil {
		db.revsLimit.Store(int64(n))
	}
	return err
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func getU64(b *bolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putU64(b *bolt.Bucket, k []byte, v uint64) error { return b.Put(k, u64(v)) }

// addU64 adds delta (possibly negative) to a counter, floored at 0.
func addU64(b *bolt.Bucket, k []byte, delta int64) error {
	if delta == 0 {
		return nil
	}
	v := int64(getU64(b, k)) + delta
	if v < 0 {
		v = 0
	}
	return putU64(b, k, uint64(v))
}
