// Package kv is the ordered, transactional key-value interface the job queue
// is written against. It is shaped like FoundationDB: serializable
// transactions retried on conflict, ordered range reads, atomic adds,
// per-transaction versionstamps and key watches. Backends: OpenBolt
// (embedded, durable, one owner process), NewMemory (tests) and FoundationDB
// (package kv/fdb, build tag fdb).
//
// It is public so that a program can keep a jobs queue (package jobs) in a
// store of its choosing, or write a backend of its own and prove it with
// the conformance suite (package kv/kvtest).
package kv

import (
	"context"
	"errors"
)

// Store is an ordered, transactional key-value store shaped like FoundationDB.
type Store interface {
	// Update runs fn in a serializable read-write transaction and commits it
	// when fn returns nil. fn may run more than once (on conflict, or when it
	// returns an error wrapping ErrConflict), so it must be idempotent and
	// must not keep state across attempts. Any other error from fn rolls the
	// transaction back and is returned as-is.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only snapshot transaction.
	View(ctx context.Context, fn func(ReadTx) error) error
	// Watch returns a channel that is closed once the key's value changes
	// after the call, or when ctx is done. A watch may fire spuriously (for
	// example on a write that stores the same value); callers re-read.
	Watch(ctx context.Context, key []byte) (<-chan struct{}, error)
	// Close releases the store. Pending watches are fired.
	Close() error
}

// ReadTx is the read side of a transaction.
type ReadTx interface {
	// Get returns a copy of the key's value, or nil, nil when the key is absent.
	Get(key []byte) ([]byte, error)
	// Range calls fn for every key in [begin, end) in key order (descending
	// with opt.Reverse), at most opt.Limit keys when Limit > 0. k and v are
	// only valid during the call; fn must not write to the transaction. An
	// error from fn stops the range and is returned.
	Range(begin, end []byte, opt RangeOptions, fn func(k, v []byte) error) error
}

// Tx is a read-write transaction. Reads see the transaction's own writes.
type Tx interface {
	ReadTx
	// Set writes value at key.
	Set(key, value []byte)
	// Clear deletes key.
	Clear(key []byte)
	// ClearRange deletes every key in [begin, end).
	ClearRange(begin, end []byte)
	// Add atomically adds delta to the little-endian signed 64-bit counter at
	// key (an absent key counts as 0).
	Add(key []byte, delta int64)
	// Versionstamp is this transaction's commit version: unique per commit
	// and increasing across commits. It is only valid inside keys and values
	// written by this transaction (on FoundationDB it is a placeholder the
	// server fills in at commit, so such keys are not readable in the same
	// transaction).
	Versionstamp() Versionstamp
}

// SnapshotTx is implemented by transactions of backends with optimistic
// concurrency (FoundationDB). SnapshotRange reads without adding read
// conflicts, and AddReadConflictKey adds one back for a key the caller
// depends on, so that concurrent transactions scanning the same range (for
// example acceptors picking a job from a queue) only conflict on what they
// actually use. Backends with one writer at a time need neither.
type SnapshotTx interface {
	SnapshotRange(begin, end []byte, opt RangeOptions, fn func(k, v []byte) error) error
	AddReadConflictKey(key []byte) error
}

// BatchSnapshotTx is implemented by transactions of backends where one
// request can carry many reads (etcd). SnapshotRanges does for each of rs
// what SnapshotRange does, calling fn with the index in rs of the range a
// pair belongs to, range after range, but asks for them all at once.
type BatchSnapshotTx interface {
	SnapshotRanges(rs []RangeRequest, fn func(i int, k, v []byte) error) error
}

// PrefetchTx is implemented by transactions of backends where one request
// can carry many reads (etcd). Prefetch reads keys all at once, so that
// the Gets of them that follow need no round trip of their own. It adds
// nothing to what the transaction depends on: only a Get (or
// AddReadConflictKey) of a prefetched key does.
type PrefetchTx interface {
	Prefetch(keys ...[]byte) error
}

// RangeRequest is one range read of a batch: [Begin, End) bounded by Opt.
type RangeRequest struct {
	Begin, End []byte
	Opt        RangeOptions
}

// RangeOptions bounds a range read.
type RangeOptions struct {
	// Limit is the maximum number of keys returned; 0 means no limit.
	Limit int
	// Reverse returns keys in descending order.
	Reverse bool
	// KeysOnly tells the store the caller does not use the values: a
	// backend that must fetch them separately (etcd) may pass nil values
	// instead. Backends that hold values next to keys pass them anyway.
	KeysOnly bool
}

// ErrConflict signals a transaction conflict. A transaction function that
// returns an error wrapping ErrConflict is retried by Store.Update, just as
// FoundationDB retries a transaction whose reads were invalidated.
var ErrConflict = errors.New("kv: transaction conflict")

// ErrTooLarge is wrapped by the error of a commit larger than the store
// takes at once (etcd's request limit, FoundationDB's 10 MB): retrying
// the same transaction fails the same way; a smaller one may pass.
var ErrTooLarge = errors.New("kv: transaction too large for the store")

// ErrClosed is returned by operations on a closed store.
var ErrClosed = errors.New("kv: store closed")

// maxRetries bounds how often Update retries on ErrConflict.
const maxRetries = 1000

// PrefixEnd returns the first key after every key that starts with prefix
// (FoundationDB's strinc), for use as the end of a prefix range. A prefix of
// only 0xFF bytes has no end; PrefixEnd then returns nil.
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
