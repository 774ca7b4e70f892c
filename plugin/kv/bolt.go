package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// BoltOptions configures OpenBolt.
type BoltOptions struct {
	// LockTimeout is how long Open waits for the file lock held by another
	// process before failing with ErrLocked. 0 means 1 s.
	LockTimeout time.Duration
	// NoSync skips fsync on commit: faster, but a committed Update may be
	// lost on power failure or kill -9. Only for tests and benchmarks.
	NoSync bool
}

// ErrLocked is returned by OpenBolt when another process holds the file.
var ErrLocked = errors.New("kv: bolt file is locked by another process (one owner at a time)")

var (
	dataBucket = []byte("kv")
	metaBucket = []byte("meta")
	versionKey = []byte("version")
)

// boltStore is the embedded, durable backend on go.etcd.io/bbolt. bbolt has
// one writer at a time, so Update is serializable; every committed Update is
// fsynced (unless NoSync), so it survives kill -9.
type boltStore struct {
	db      *bolt.DB
	watches *watchRegistry
	commits *groupCommit
}

// OpenBolt opens (creating if needed) the bbolt file at path. The file is
// locked for this process; a second opener fails with ErrLocked after
// opts.LockTimeout.
func OpenBolt(path string, opts BoltOptions) (Store, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = time.Second
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, NoSync: opts.NoSync, FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s (waited %s)", ErrLocked, path, timeout)
		}
		return nil, fmt.Errorf("kv: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(dataBucket); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(metaBucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("kv: init %s: %w", path, err)
	}
	watches := newWatchRegistry()
	return &boltStore{db: db, watches: watches, commits: startGroupCommit(db, watches)}, nil
}

// View implements Store.
func (s *boltStore) View(ctx context.Context, fn func(ReadTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		return fn(boltReadTx{tx.Bucket(dataBucket)})
	})
	return mapBoltErr(err)
}

// Update implements Store. Concurrent Updates share commits (see
// groupCommit).
func (s *boltStore) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.commits.do(ctx, fn)
}

// Watch implements Store.
func (s *boltStore) Watch(ctx context.Context, key []byte) (<-chan struct{}, error) {
	return s.watches.add(ctx, key)
}

// Close implements Store; it releases the file lock.
func (s *boltStore) Close() error {
	s.commits.stop()
	s.watches.close()
	return s.db.Close()
}

func mapBoltErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

type boltReadTx struct{ b *bolt.Bucket }

func (t boltReadTx) Get(key []byte) ([]byte, error) {
	c := t.b.Cursor()
	k, v := c.Seek(key)
	if k == nil || !bytes.Equal(k, key) {
		return nil, nil
	}
	return append([]byte{}, v...), nil
}

func (t boltReadTx) Range(begin, end []byte, opt RangeOptions, fn func(k, v []byte) error) error {
	c := t.b.Cursor()
	n := 0
	if !opt.Reverse {
		for k, v := c.Seek(begin); k != nil && (end == nil || bytes.Compare(k, end) < 0); k, v = c.Next() {
			if opt.Limit > 0 && n >= opt.Limit {
				return nil
			}
			n++
			if err := fn(k, v); err != nil {
				return err
			}
		}
		return nil
	}
	var k, v []byte
	if end == nil {
		k, v = c.Last()
	} else {
		k, _ = c.Seek(end)
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
	}
	for ; k != nil && bytes.Compare(k, begin) >= 0; k, v = c.Prev() {
		if opt.Limit > 0 && n >= opt.Limit {
			return nil
		}
		n++
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

type boltTx struct {
	boltReadTx
	meta    *bolt.Bucket
	writes  writeSet
	version *groupVersion // shared by the Updates of one commit
	order   uint16        // this Update's place in its commit
	vs      *Versionstamp
	err     error
}

func newBoltTx(tx *bolt.Tx, version *groupVersion, order uint16) *boltTx {
	return &boltTx{boltReadTx: boltReadTx{tx.Bucket(dataBucket)}, meta: tx.Bucket(metaBucket), version: version, order: order}
}

// wrote reports whether the Update changed anything (a versionstamp taken
// bumps the stored counter).
func (t *boltTx) wrote() bool {
	return len(t.writes.keys) > 0 || len(t.writes.ranges) > 0 || t.vs != nil
}

func (t *boltTx) fail(err error) {
	if err != nil && t.err == nil {
		t.err = err
	}
}

func (t *boltTx) Set(key, value []byte) {
	t.writes.key(key)
	t.fail(t.b.Put(append([]byte(nil), key...), append([]byte{}, value...)))
}

func (t *boltTx) Clear(key []byte) {
	t.writes.key(key)
	t.fail(t.b.Delete(key))
}

func (t *boltTx) ClearRange(begin, end []byte) {
	t.writes.clearRange(begin, end)
	var keys [][]byte
	c := t.b.Cursor()
	for k, _ := c.Seek(begin); k != nil && (end == nil || bytes.Compare(k, end) < 0); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		t.fail(t.b.Delete(k))
	}
}

func (t *boltTx) Add(key []byte, delta int64) {
	cur, err := t.Get(key)
	t.fail(err)
	t.writes.key(key)
	t.fail(t.b.Put(append([]byte(nil), key...), addLE(cur, delta)))
}

// Versionstamp is the commit's version, taken once per bbolt transaction
// from a counter persisted in the file, with this Update's place in the
// commit as batch order.
func (t *boltTx) Versionstamp() Versionstamp {
	if t.vs != nil {
		return *t.vs
	}
	if !t.version.taken {
		var cur uint64
		if v := t.meta.Get(versionKey); len(v) == 8 {
			cur = binary.BigEndian.Uint64(v)
		}
		cur++
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, cur)
		t.fail(t.meta.Put(versionKey, b))
		t.version.version, t.version.taken = cur, true
	}
	vs := NewVersionstamp(t.version.version, t.order)
	t.vs = &vs
	return vs
}
