//go:build fdb

// Many processes on many hosts may share one FoundationDB store, which is
// how several replication nodes share one job queue.

package fdb

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apple/foundationdb/bindings/go/src/fdb"
	"github.com/couchepi/couchepi/plugin/kv"
)

// APIVersion is the FoundationDB API version this backend selects.
const APIVersion = 710

// codeNotCommitted is FoundationDB's retryable "transaction not committed
// due to conflict" error, used to retry on kv.ErrConflict.
const codeNotCommitted = 1020

// codeTooLarge is FoundationDB's transaction_too_large (over 10 MB).
const codeTooLarge = 2101

// Options configures Open.
type Options struct {
	// ClusterFile is the cluster file path; "" means the default.
	ClusterFile string
	// Prefix is prepended to every key, confining the store to a subspace.
	Prefix []byte
}

var apiOnce sync.Once
var apiErr error

// Open connects to FoundationDB and returns a Store on it.
func Open(opts Options) (kv.Store, error) {
	apiOnce.Do(func() {
		if fdb.IsAPIVersionSelected() {
			if v, err := fdb.GetAPIVersion(); err == nil && v != APIVersion {
				apiErr = fmt.Errorf("kv/fdb: API version %d already selected, need %d", v, APIVersion)
			}
			return
		}
		apiErr = fdb.APIVersion(APIVersion)
	})
	if apiErr != nil {
		return nil, apiErr
	}
	db, err := fdb.OpenDatabase(opts.ClusterFile)
	if err != nil {
		return nil, fmt.Errorf("kv/fdb: open database: %w", err)
	}
	return &store{db: db, prefix: append([]byte(nil), opts.Prefix...), watches: map[*fdbWatch]struct{}{}}, nil
}

type store struct {
	db     fdb.Database
	prefix []byte

	mu      sync.Mutex
	closed  bool
	watches map[*fdbWatch]struct{}
}

type fdbWatch struct {
	f    fdb.FutureNil
	ch   chan struct{}
	once sync.Once
}

func (w *fdbWatch) fire() { w.once.Do(func() { close(w.ch) }) }

func (s *store) key(k []byte) fdb.Key {
	out := make([]byte, 0, len(s.prefix)+len(k))
	return fdb.Key(append(append(out, s.prefix...), k...))
}

func (s *store) end(k []byte) fdb.Key {
	if k == nil {
		if len(s.prefix) == 0 {
			return fdb.Key{0xFF}
		}
		return fdb.Key(kv.PrefixEnd(s.prefix))
	}
	return s.key(k)
}

// Update implements kv.Store on Database.Transact, which retries retryable
// FoundationDB errors; kv.ErrConflict from fn is mapped to one.
func (s *store) Update(ctx context.Context, fn func(kv.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := s.db.Transact(func(tr fdb.Transaction) (any, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := deadline(ctx, tr.Options()); err != nil {
			return nil, err
		}
		t := &tx{readTx: readTx{s: s, rt: tr}, tr: tr}
		if err := fn(t); err != nil {
			if errors.Is(err, kv.ErrConflict) {
				return nil, fdb.Error{Code: codeNotCommitted}
			}
			return nil, err
		}
		return nil, nil
	})
	var fe fdb.Error
	if errors.As(err, &fe) && fe.Code == codeTooLarge {
		return fmt.Errorf("kv/fdb: %w: %v", kv.ErrTooLarge, err)
	}
	return err
}

// deadline bounds a transaction (all its retries) by ctx's deadline.
func deadline(ctx context.Context, o fdb.TransactionOptions) error {
	d, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	ms := time.Until(d).Milliseconds()
	if ms < 1 {
		return context.DeadlineExceeded
	}
	return o.SetTimeout(ms)
}

// View implements kv.Store.
func (s *store) View(ctx context.Context, fn func(kv.ReadTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := s.db.ReadTransact(func(rt fdb.ReadTransaction) (any, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := deadline(ctx, rt.Options()); err != nil {
			return nil, err
		}
		return nil, fn(readTx{s: s, rt: rt})
	})
	return err
}

// Watch implements kv.Store with a FoundationDB watch, which fires when the
// key's value differs from the value it had when the watch was committed.
func (s *store) Watch(ctx context.Context, key []byte) (<-chan struct{}, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, kv.ErrClosed
	}
	s.mu.Unlock()
	var f fdb.FutureNil
	_, err := s.db.Transact(func(tr fdb.Transaction) (any, error) {
		f = tr.Watch(s.key(key))
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	w := &fdbWatch{f: f, ch: make(chan struct{})}
	s.mu.Lock()
	s.watches[w] = struct{}{}
	s.mu.Unlock()
	go func() {
		_ = f.Get() // a cancelled or failed watch fires too; callers re-read
		s.mu.Lock()
		delete(s.watches, w)
		s.mu.Unlock()
		w.fire()
	}()
	go func() {
		select {
		case <-ctx.Done():
			f.Cancel()
		case <-w.ch:
		}
	}()
	return w.ch, nil
}

// Close cancels pending watches and closes the database handle.
func (s *store) Close() error {
	s.mu.Lock()
	s.closed = true
	ws := make([]*fdbWatch, 0, len(s.watches))
	for w := range s.watches {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.f.Cancel()
	}
	s.db.Close()
	return nil
}

type readTx struct {
	s  *store
	rt fdb.ReadTransaction
}

func (t readTx) Get(key []byte) ([]byte, error) {
	v, err := t.rt.Get(t.s.key(key)).Get()
	if err != nil || v == nil {
		return nil, err
	}
	return v, nil
}

func (t readTx) Range(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
	r := fdb.KeyRange{Begin: t.s.key(begin), End: t.s.end(end)}
	it := t.rt.GetRange(r, fdb.RangeOptions{Limit: opt.Limit, Reverse: opt.Reverse}).Iterator()
	for it.Advance() {
		kvp, err := it.Get()
		if err != nil {
			return err
		}
		if err := fn(kvp.Key[len(t.s.prefix):], kvp.Value); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotRange implements kv.SnapshotTx: a range read without read conflicts.
func (t *tx) SnapshotRange(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
	return readTx{s: t.s, rt: t.tr.Snapshot()}.Range(begin, end, opt, fn)
}

// AddReadConflictKey implements kv.SnapshotTx.
func (t *tx) AddReadConflictKey(key []byte) error {
	return t.tr.AddReadConflictKey(t.s.key(key))
}

type tx struct {
	readTx
	tr fdb.Transaction
	// placeholder stands for this transaction's versionstamp until commit.
	placeholder *kv.Versionstamp
}

// Set writes value at key. A key or value containing this transaction's
// versionstamp placeholder becomes a versionstamped key or value, filled in
// by FoundationDB at commit (one placeholder per key or value).
func (t *tx) Set(key, value []byte) {
	k := t.s.key(key)
	if t.placeholder != nil {
		if i := bytes.Index(k, t.placeholder[:]); i >= 0 {
			t.tr.SetVersionstampedKey(fdb.Key(withOffset(k, i)), value)
			return
		}
		if i := bytes.Index(value, t.placeholder[:]); i >= 0 {
			t.tr.SetVersionstampedValue(k, withOffset(value, i))
			return
		}
	}
	t.tr.Set(k, value)
}

// withOffset appends the little-endian 32-bit offset FoundationDB reads to
// find the versionstamp position.
func withOffset(b []byte, i int) []byte {
	out := make([]byte, len(b), len(b)+4)
	copy(out, b)
	return binary.LittleEndian.AppendUint32(out, uint32(i))
}

func (t *tx) Clear(key []byte) { t.tr.Clear(t.s.key(key)) }

func (t *tx) ClearRange(begin, end []byte) {
	t.tr.ClearRange(fdb.KeyRange{Begin: t.s.key(begin), End: t.s.end(end)})
}

func (t *tx) Add(key []byte, delta int64) {
	t.tr.Add(t.s.key(key), binary.LittleEndian.AppendUint64(nil, uint64(delta)))
}

// Versionstamp returns a random placeholder for this transaction's
// versionstamp; Set turns keys and values containing it into versionstamped
// operations. Such keys are not readable until the transaction commits.
func (t *tx) Versionstamp() kv.Versionstamp {
	if t.placeholder == nil {
		p := kv.Placeholder()
		t.placeholder = &p
	}
	return *t.placeholder
}
