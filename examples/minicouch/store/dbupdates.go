package store

import (
	"context"
	"encoding/binary"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// The store keeps a feed of database events for _db_updates, as CouchDB's
// _global_changes does: one entry per database, its newest event (created,
// updated or deleted), in the order of a store-wide sequence. An event is
// written in the same transaction as the change it reports, so the feed
// and the databases never disagree, across restarts included.

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

// dbUpdatesFeed wakes the waiters of the feed.
type dbUpdatesFeed struct {
	mu     sync.Mutex
	notify chan struct{}
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

// DBUpdatesSeq is the sequence of the newest database event.
func (s *Store) DBUpdatesSeq() uint64 {
	var seq uint64
	s.bolt.View(func(tx *bolt.Tx) error {
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
	var out []DBUpdate
	err := s.bolt.View(func(tx *bolt.Tx) error {
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
