package store

import (
	"context"
	"encoding/binary"
	"errors"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The store keeps a feed of database events for _db_updates, as CouchDB's
// _global_changes does: one entry per database, its newest event (created,
// updated or deleted), in the order of a store-wide sequence. Creations and
// deletions are written in the transaction that makes them. Updates are
// coalesced: a write marks its database, and the marks are written in one
// transaction when the feed is read or at most dbUpdatesDelay later (as
// CouchDB buffers its global changes), so the single-doc write path touches
// no feed pages. A crash can lose the marks of the last dbUpdatesDelay,
// never an entry once written.

var (
	bucketDBUpdates    = []byte("db_updates")      // seq (8 bytes, big-endian) -> type byte + db name
	bucketDBUpdateLast = []byte("db_updates_last") // db name -> its entry's key in db_updates; keyLastSeq -> last seq
	keyLastSeq         = []byte{0}                 // no db name holds a zero byte
)

// DBUpdate is one _db_updates entry.
type DBUpdate struct {
	Seq    uint64
	DBName string
	Type   string // created, updated or deleted
}

var dbUpdateTypes = []string{"created", "updated", "deleted"}

// dbUpdatesDelay bounds how long an update waits to be written to the feed.
const dbUpdatesDelay = 100 * time.Millisecond

// dbUpdatesFeed wakes the waiters of the feed and holds the databases
// updated since the feed was last written.
type dbUpdatesFeed struct {
	mu      sync.Mutex
	notify  chan struct{}
	pending map[string]bool
	timer   *time.Timer // writes the pending marks; nil when none is set
}

// mark notes an update of db, to be written to the feed by flush, which
// it schedules.
func (f *dbUpdatesFeed) mark(db string, flush func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		f.pending = map[string]bool{}
	}
	f.pending[db] = true
	if f.timer == nil {
		f.timer = time.AfterFunc(dbUpdatesDelay, flush)
	}
}

// take returns and clears the pending marks.
func (f *dbUpdatesFeed) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	out := make([]string, 0, len(f.pending))
	for db := range f.pending {
		out = append(out, db)
	}
	f.pending = nil
	return out
}

// forget drops a pending mark of db (it is being created or deleted: that
// event supersedes the update).
func (f *dbUpdatesFeed) forget(db string) {
	f.mu.Lock()
	delete(f.pending, db)
	f.mu.Unlock()
}

func (f *dbUpdatesFeed) wake() {
	f.mu.Lock()
	if f.notify != nil {
		close(f.notify)
	}
	f.notify = make(chan struct{})
	f.mu.Unlock()
}

func (f *dbUpdatesFeed) wait() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notify == nil {
		f.notify = make(chan struct{})
	}
	return f.notify
}

// createDBUpdateBuckets makes the feed's buckets of a new or older store.
func createDBUpdateBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketDBUpdates, bucketDBUpdateLast} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// recordDBUpdate makes typ (0 created, 1 updated, 2 deleted) the newest
// event of db, inside the transaction that does it.
func recordDBUpdate(tx *bolt.Tx, db string, typ byte) error {
	feed, last := tx.Bucket(bucketDBUpdates), tx.Bucket(bucketDBUpdateLast)
	if old := last.Get([]byte(db)); old != nil {
		if err := feed.Delete(old); err != nil {
			return err
		}
	}
	seq := uint64(1)
	if v := last.Get(keyLastSeq); len(v) == 8 {
		seq = binary.BigEndian.Uint64(v) + 1
	}
	key := binary.BigEndian.AppendUint64(nil, seq)
	if err := last.Put(keyLastSeq, key); err != nil {
		return err
	}
	if err := last.Put([]byte(db), key); err != nil {
		return err
	}
	return feed.Put(key, append([]byte{typ}, db...))
}

// markDBUpdate notes that db changed (called inside its write transaction;
// a rolled-back write leaves a harmless extra "updated").
func (s *Store) markDBUpdate(db string) { s.updates.mark(db, s.flushDBUpdates) }

// flushDBUpdates writes the pending update marks to the feed.
func (s *Store) flushDBUpdates() {
	dbs := s.updates.take()
	if len(dbs) == 0 {
		return
	}
	sort.Strings(dbs)
	err := s.w.do(context.Background(), func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketDBs)
		for _, db := range dbs {
			if root.Bucket([]byte(db)) == nil {
				continue // deleted meanwhile: its event is "deleted"
			}
			if err := recordDBUpdate(tx, db, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errClosed) {
			s.log.Warn("writing _db_updates entries", "dbs", len(dbs), "error", err)
		}
		return
	}
	s.updates.wake()
}

// DBUpdatesSeq is the sequence of the newest database event.
func (s *Store) DBUpdatesSeq() uint64 {
	s.flushDBUpdates()
	var seq uint64
	s.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketDBUpdateLast).Get(keyLastSeq); len(v) == 8 {
			seq = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return seq
}

// DBUpdates calls fn with the newest event of every database whose event
// came after since, in sequence order, at most limit (0 = all).
func (s *Store) DBUpdates(since uint64, limit int, fn func(DBUpdate) error) error {
	s.flushDBUpdates()
	var out []DBUpdate
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDBUpdates).Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, since+1)); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			if len(v) < 1 || int(v[0]) >= len(dbUpdateTypes) {
				continue
			}
			out = append(out, DBUpdate{Seq: binary.BigEndian.Uint64(k), DBName: string(v[1:]), Type: dbUpdateTypes[v[0]]})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, u := range out {
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

// WaitDBUpdates blocks until a database event comes after after or ctx
// ends, and returns the newest sequence.
func (s *Store) WaitDBUpdates(ctx context.Context, after uint64) (uint64, error) {
	for {
		ch := s.updates.wait()
		if seq := s.DBUpdatesSeq(); seq > after {
			return seq, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return s.DBUpdatesSeq(), ctx.Err()
		}
	}
}
