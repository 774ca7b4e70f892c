package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sort"
	"sync"
)

// memoryStore is the in-memory backend: a sorted slice of entries guarded by
// a read-write mutex. Update holds the write lock for the whole transaction,
// so transactions are serializable; writes are applied in place and undone
// from a log on rollback. Meant for tests and small data sets: inserts cost
// O(n) moves.
type memoryStore struct {
	mu      sync.RWMutex
	closed  bool
	entries []entry
	version uint64
	watches *watchRegistry
}

type entry struct {
	key, value []byte
}

// NewMemory returns an empty in-memory Store (not durable; for tests).
func NewMemory() Store {
	return &memoryStore{watches: newWatchRegistry()}
}

func (m *memoryStore) find(key []byte) (int, bool) {
	i := sort.Search(len(m.entries), func(i int) bool { return bytes.Compare(m.entries[i].key, key) >= 0 })
	return i, i < len(m.entries) && bytes.Equal(m.entries[i].key, key)
}

func (m *memoryStore) get(key []byte) []byte {
	if i, ok := m.find(key); ok {
		return append([]byte{}, m.entries[i].value...)
	}
	return nil
}

func (m *memoryStore) rangeRead(begin, end []byte, opt RangeOptions, fn func(k, v []byte) error) error {
	lo, _ := m.find(begin)
	hi, _ := m.find(end)
	if end == nil {
		hi = len(m.entries)
	}
	n := 0
	if !opt.Reverse {
		for i := lo; i < hi; i++ {
			if opt.Limit > 0 && n >= opt.Limit {
				break
			}
			n++
			if err := fn(m.entries[i].key, m.entries[i].value); err != nil {
				return err
			}
		}
		return nil
	}
	for i := hi - 1; i >= lo; i-- {
		if opt.Limit > 0 && n >= opt.Limit {
			break
		}
		n++
		if err := fn(m.entries[i].key, m.entries[i].value); err != nil {
			return err
		}
	}
	return nil
}

// View implements Store.
func (m *memoryStore) View(ctx context.Context, fn func(ReadTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	return fn(memoryReadTx{m})
}

// Update implements Store.
func (m *memoryStore) Update(ctx context.Context, fn func(Tx) error) error {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return ErrClosed
		}
		tx := &memoryTx{memoryReadTx: memoryReadTx{m}}
		err := fn(tx)
		if err != nil {
			tx.rollback()
			m.mu.Unlock()
			if errors.Is(err, ErrConflict) && attempt < maxRetries {
				continue
			}
			return err
		}
		if tx.vsUsed {
			m.version++
		}
		m.mu.Unlock()
		m.watches.fire(&tx.writes)
		return nil
	}
}

// Watch implements Store.
func (m *memoryStore) Watch(ctx context.Context, key []byte) (<-chan struct{}, error) {
	return m.watches.add(ctx, key)
}

// Close implements Store.
func (m *memoryStore) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.watches.close()
	return nil
}

type memoryReadTx struct{ m *memoryStore }

func (t memoryReadTx) Get(key []byte) ([]byte, error) { return t.m.get(key), nil }

func (t memoryReadTx) Range(begin, end []byte, opt RangeOptions, fn func(k, v []byte) error) error {
	return t.m.rangeRead(begin, end, opt, fn)
}

// undo is one rollback step: restore key to value (absent when !present).
type undo struct {
	key     []byte
	value   []byte
	present bool
}

type memoryTx struct {
	memoryReadTx
	undo   []undo
	writes writeSet
	vsUsed bool
}

func (t *memoryTx) put(key, value []byte) {
	m := t.m
	i, ok := m.find(key)
	if ok {
		t.undo = append(t.undo, undo{key: m.entries[i].key, value: m.entries[i].value, present: true})
		m.entries[i].value = value
		return
	}
	k := append([]byte(nil), key...)
	t.undo = append(t.undo, undo{key: k})
	m.entries = append(m.entries, entry{})
	copy(m.entries[i+1:], m.entries[i:])
	m.entries[i] = entry{key: k, value: value}
}

func (t *memoryTx) del(key []byte) {
	m := t.m
	i, ok := m.find(key)
	if !ok {
		return
	}
	t.undo = append(t.undo, undo{key: m.entries[i].key, value: m.entries[i].value, present: true})
	m.entries = append(m.entries[:i], m.entries[i+1:]...)
}

func (t *memoryTx) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		j, ok := t.m.find(u.key)
		switch {
		case u.present && ok:
			t.m.entries[j].value = u.value
		case u.present:
			t.m.entries = append(t.m.entries, entry{})
			copy(t.m.entries[j+1:], t.m.entries[j:])
			t.m.entries[j] = entry{key: u.key, value: u.value}
		case ok:
			t.m.entries = append(t.m.entries[:j], t.m.entries[j+1:]...)
		}
	}
	t.undo = nil
}

func (t *memoryTx) Set(key, value []byte) {
	t.writes.key(key)
	t.put(key, append([]byte{}, value...))
}

func (t *memoryTx) Clear(key []byte) {
	t.writes.key(key)
	t.del(key)
}

func (t *memoryTx) ClearRange(begin, end []byte) {
	t.writes.clearRange(begin, end)
	m := t.m
	lo, _ := m.find(begin)
	hi, _ := m.find(end)
	if end == nil {
		hi = len(m.entries)
	}
	for i := lo; i < hi; i++ {
		t.undo = append(t.undo, undo{key: m.entries[i].key, value: m.entries[i].value, present: true})
	}
	if hi > lo {
		m.entries = append(m.entries[:lo], m.entries[hi:]...)
	}
}

func (t *memoryTx) Add(key []byte, delta int64) {
	t.writes.key(key)
	cur := t.m.get(key)
	t.put(key, addLE(cur, delta))
}

func (t *memoryTx) Versionstamp() Versionstamp {
	t.vsUsed = true
	return NewVersionstamp(t.m.version+1, 0)
}

// addLE adds delta to the little-endian int64 in cur (shorter values are
// zero-extended, like FoundationDB's ADD) and returns the 8-byte result.
func addLE(cur []byte, delta int64) []byte {
	var b [8]byte
	copy(b[:], cur)
	v := int64(binary.LittleEndian.Uint64(b[:])) + delta
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, uint64(v))
	return out
}
