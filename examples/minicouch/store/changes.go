package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"

	bolt "go.etcd.io/bbolt"
)

// changesBatch is how many rows are read per read transaction; callbacks
// run between transactions so a slow consumer never holds one open.
const changesBatch = 1000

// Changes calls fn for each document changed after opts.Since, in sequence
// order (each document once, at its latest sequence). fn is called outside
// any storage transaction, so it may block; returning ErrStop ends the
// iteration without error.
func (db *DB) Changes(ctx context.Context, opts ChangesOptions, fn func(Change) error) (ChangesResult, error) {
	res := ChangesResult{LastSeq: opts.Since}
	if opts.Descending {
		res.LastSeq = db.UpdateSeq()
	}
	var next []byte // key to resume from
	if !opts.Descending {
		next = u64(opts.Since + 1)
	} else if opts.Since > 0 {
		next = u64(opts.Since - 1)
	}
	sent := 0
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var rows []Change
		done := false
		err := db.view(func(b *bolt.Bucket) error {
			c := b.Bucket(bucketSeqs).Cursor()
			docs := b.Bucket(bucketDocs)
			var k, v []byte
			switch {
			case !opts.Descending:
				k, v = c.Seek(next)
			case next == nil:
				k, v = c.Last()
			default:
				k, v = c.Seek(next)
				if k == nil || !bytes.Equal(k, next) {
					k, v = c.Prev()
					if k == nil {
						k, v = c.Last()
						if k != nil && bytes.Compare(k, next) > 0 {
							k = nil
						}
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
				if opts.Limit > 0 && sent+len(rows) >= opts.Limit {
					done = true
					if !opts.Descending {
						for ; k != nil; k, _ = c.Next() {
							res.Pending++
						}
					}
					return nil
				}
				if len(rows) == changesBatch {
					next = append([]byte(nil), k...)
					return nil
				}
				rec, err := decodeRecord(docs.Get(v))
				if err != nil {
					return err
				}
				ch := Change{Seq: binary.BigEndian.Uint64(k), ID: string(v)}
				leaves := rec.tree.Leaves()
				ch.Revs = make([]string, len(leaves))
				for i, l := range leaves {
					ch.Revs[i] = l.Rev.String()
				}
				ch.Deleted = len(leaves) > 0 && leaves[0].Deleted
				rows = append(rows, ch)
			}
			done = true
			return nil
		})
		if err != nil {
			return res, err
		}
		for _, ch := range rows {
			err := fn(ch)
			if err != nil && !errors.Is(err, ErrStop) {
				return res, err
			}
			res.LastSeq = ch.Seq
			sent++
			if err != nil { // ErrStop: this row was taken, the rest is pending
				if opts.Descending {
					return res, nil
				}
				res.Pending, err = db.countAfter(ch.Seq)
				return res, err
			}
		}
		if done {
			return res, nil
		}
	}
}

// countAfter counts the changes rows after seq.
func (db *DB) countAfter(seq uint64) (int64, error) {
	var n int64
	err := db.view(func(b *bolt.Bucket) error {
		c := b.Bucket(bucketSeqs).Cursor()
		for k, _ := c.Seek(u64(seq + 1)); k != nil; k, _ = c.Next() {
			n++
		}
		return nil
	})
	return n, err
}
