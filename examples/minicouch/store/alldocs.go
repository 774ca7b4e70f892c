package store

import (
	"bytes"
	"context"
	"errors"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// rowOf decodes an _all_docs row from a docs or local bucket value; ok is
// false for deleted documents.
func rowOf(local bool, k, v []byte) (AllDocsRow, bool, error) {
	if local {
		n, _, err := readUvarint(v, 0)
		return AllDocsRow{ID: string(k), Rev: "0-" + strconv.FormatUint(n, 10)}, true, err
	}
	del, _, winner, _, err := recordHeader(v)
	return AllDocsRow{ID: string(k), Rev: winner, Deleted: del}, !del, err
}

// AllDocs calls fn for each non-deleted document in id order (raw byte
// order) within opts' range, or for each of opts.Keys. Design documents are
// included, _local documents are not. fn is called outside any storage
// transaction; returning ErrStop ends the iteration.
func (db *DB) AllDocs(ctx context.Context, opts AllDocsOptions, fn func(AllDocsRow) error) (AllDocsResult, error) {
	return db.allDocs(ctx, bucketDocs, opts, fn)
}

// LocalDocs is AllDocs over the _local documents (_local_docs).
func (db *DB) LocalDocs(ctx context.Context, opts AllDocsOptions, fn func(AllDocsRow) error) (AllDocsResult, error) {
	return db.allDocs(ctx, bucketLocal, opts, fn)
}

// allDocs is AllDocs over one bucket (docs or local).
func (db *DB) allDocs(ctx context.Context, bucket []byte, opts AllDocsOptions, fn func(AllDocsRow) error) (AllDocsResult, error) {
	local := bytes.Equal(bucket, bucketLocal)
	var res AllDocsResult
	if opts.Keys != nil {
		return res, db.allDocsKeys(ctx, bucket, local, opts, fn, &res)
	}
	var next []byte
	if opts.StartKey != nil {
		next = []byte(*opts.StartKey)
	}
	first := true
	var started startOnce
	skip, sent := opts.Skip, 0
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var rows []AllDocsRow
		done := false
		err := db.view(func(b *bolt.Bucket) error {
			bk := b.Bucket(bucket)
			c := bk.Cursor()
			if first {
				first = false
				if local {
					res.TotalRows = uint64(bk.Stats().KeyN)
				} else {
					res.TotalRows = getU64(b.Bucket(bucketMeta), metaDocCount)
				}
				res.Offset = uint64(opts.Skip)
				if next != nil {
					res.Offset += countBefore(c, local, next, opts.Descending)
				}
			}
			var k, v []byte
			switch {
			case next == nil && opts.Descending:
				k, v = c.Last()
			case next == nil:
				k, v = c.First()
			default:
				k, v = c.Seek(next)
				if opts.Descending && (k == nil || !bytes.Equal(k, next)) {
					if k == nil {
						k, v = c.Last()
					} else {
						k, v = c.Prev()
					}
				}
			}
			for ; k != nil; func() {
				if opts.Descending {
					k, v = c.Prev()
				} else {
					k, v = c.Next()
				}
			}() {
				if opts.EndKey != nil {
					cmp := bytes.Compare(k, []byte(*opts.EndKey))
					if opts.Descending {
						cmp = -cmp
					}
					if cmp > 0 || (cmp == 0 && opts.ExclusiveEnd) {
						break
					}
				}
				if len(rows) == changesBatch {
					next = append([]byte(nil), k...)
					return nil
				}
				row, live, err := rowOf(local, k, v)
				if err != nil {
					return err
				}
				if !live {
					continue
				}
				if skip > 0 {
					skip--
					continue
				}
				if opts.Limit > 0 && sent+len(rows) >= opts.Limit {
					break
				}
				rows = append(rows, row)
			}
			done = true
			return nil
		})
		if err != nil {
			return res, err
		}
		started.do(opts.Start, res)
		for _, r := range rows {
			if err := fn(r); err != nil {
				if errors.Is(err, ErrStop) {
					return res, nil
				}
				return res, err
			}
			sent++
		}
		if done {
			return res, nil
		}
	}
}

// countBefore counts live documents that come before key in iteration order.
func countBefore(c *bolt.Cursor, local bool, key []byte, descending bool) uint64 {
	var n uint64
	if !descending {
		for k, v := c.First(); k != nil && bytes.Compare(k, key) < 0; k, v = c.Next() {
			if _, live, _ := rowOf(local, k, v); live {
				n++
			}
		}
		return n
	}
	for k, v := c.Last(); k != nil && bytes.Compare(k, key) > 0; k, v = c.Prev() {
		if _, live, _ := rowOf(local, k, v); live {
			n++
		}
	}
	return n
}

func (db *DB) allDocsKeys(ctx context.Context, bucket []byte, local bool, opts AllDocsOptions, fn func(AllDocsRow) error, res *AllDocsResult) error {
	var rows []AllDocsRow
	err := db.view(func(b *bolt.Bucket) error {
		bk := b.Bucket(bucket)
		if local {
			res.TotalRows = uint64(bk.Stats().KeyN)
		} else {
			res.TotalRows = getU64(b.Bucket(bucketMeta), metaDocCount)
		}
		keys := opts.Keys
		if opts.Descending {
			keys = make([]string, len(opts.Keys))
			for i, k := range opts.Keys {
				keys[len(keys)-1-i] = k
			}
		}
		for _, k := range keys {
			v := bk.Get([]byte(k))
			if v == nil {
				rows = append(rows, AllDocsRow{ID: k, Missing: true})
				continue
			}
			row, _, err := rowOf(local, []byte(k), v)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.Offset = uint64(opts.Skip)
	var started startOnce
	started.do(opts.Start, *res)
	rows = rows[min(opts.Skip, len(rows)):]
	if opts.Limit > 0 && len(rows) > opts.Limit {
		rows = rows[:opts.Limit]
	}
	for _, r := range rows {
		if err := fn(r); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

// startOnce calls an AllDocsOptions.Start callback at most once.
type startOnce bool

func (s *startOnce) do(fn func(AllDocsResult), res AllDocsResult) {
	if fn != nil && !*s {
		*s = true
		fn(res)
	}
}
