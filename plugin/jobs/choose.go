package jobs

import (
	"context"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Candidate is a due pending job offered to AcceptOptions.Choose.
type Candidate struct {
	ID    string
	STime time.Time // zero for a job added to run as soon as possible
	Tag   string    // its Options.Tag; "" when the queue does not tag
}

// maxTags bounds how many tags one Accept looks at through the tag index.
const maxTags = 1024

// tagValue is the value of a pending entry indexed under tag: never empty,
// so an indexed entry is told from one written by a queue without Tag.
func tagValue(tag string) []byte { return pack(nil, tag) }

// entryTag decodes a pending entry's value; ok is false when the entry is
// not indexed by tag.
func entryTag(v []byte) (tag string, ok bool) {
	if len(v) == 0 {
		return "", false
	}
	el, err := unpack(v)
	if err != nil || len(el) != 1 {
		return "", false
	}
	tag, ok = el[0].(string)
	return tag, ok
}

// tagOf returns the tag of a job being enqueued; data nil reads its data.
func (tx *Tx) tagOf(typ, id string, r *row, data []byte) (string, error) {
	if data == nil {
		var err error
		if data, err = tx.q.readData(tx.t, typ, id, r); err != nil {
			return "", err
		}
	}
	return tx.q.opts.Tag(typ, id, data), nil
}

// setPending writes the pending entry of id at stime and, when the queue
// tags, its tag index entry. No entry of id may exist (clearPending first).
func (tx *Tx) setPending(typ, id string, r *row, stime int64, data []byte) error {
	if tx.q.opts.Tag == nil {
		tx.t.Set(tx.q.l.pending(typ, stime, id), nil)
		return nil
	}
	tag, err := tx.tagOf(typ, id, r, data)
	if err != nil {
		return err
	}
	tx.t.Set(tx.q.l.pending(typ, stime, id), tagValue(tag))
	tx.t.Set(tx.q.l.tagged(typ, tag, stime, id), nil)
	return nil
}

// clearPending removes the pending entry of id at stime and its tag index
// entry, if it has one (whether or not this queue tags).
func (tx *Tx) clearPending(typ string, stime int64, id string) error {
	key := tx.q.l.pending(typ, stime, id)
	v, err := tx.t.Get(key)
	if err != nil {
		return err
	}
	if tag, ok := entryTag(v); ok {
		tx.t.Clear(tx.q.l.tagged(typ, tag, stime, id))
	}
	tx.t.Clear(key)
	return nil
}

// choose offers the due candidates to fn and returns the picked pending
// key, and its tag index key when it was found through the index; nil when
// nothing is due. With Options.Tag it reads the earliest entry of each tag
// (one short read per tag); when no tagged job is due (or the queue does
// not tag) it offers up to pickBatch due jobs in stime order, so jobs left
// unindexed by a queue without Tag still run.
func (tx *Tx) choose(scan scanFunc, typ string, maxS int64, fn func([]Candidate) int) (key, tagKey []byte, err error) {
	l := tx.q.l
	var cands []Candidate
	var keys [][]byte
	if tx.q.opts.Tag != nil {
		base := l.taggedType(typ)
		end := kv.PrefixEnd(base)
		for begin, n := base, 0; n < maxTags; n++ {
			var tag string
			found := false
			err := scan(begin, end, kv.RangeOptions{Limit: 1, KeysOnly: true}, func(k, _ []byte) error {
				el, err := unpackAfter(base, k)
				if err != nil || len(el) != 3 {
					return errBadKey
				}
				found = true
				tag = el[0].(string)
				stime, id := el[1].(int64), el[2].(string)
				if stime <= maxS {
					cands = append(cands, Candidate{ID: id, STime: fromMS(stime), Tag: tag})
					keys = append(keys, append([]byte(nil), k...))
				}
				return nil
			})
			if err != nil {
				return nil, nil, err
			}
			if !found {
				break
			}
			begin = kv.PrefixEnd(l.taggedTag(typ, tag))
		}
		if len(cands) > 0 {
			i := pickIndex(fn, cands)
			return l.pending(typ, ms(cands[i].STime), cands[i].ID), keys[i], nil
		}
	}
	base := l.pendingType(typ)
	err = scan(base, kv.PrefixEnd(l.pendingAt(typ, maxS)), kv.RangeOptions{Limit: pickBatch}, func(k, v []byte) error {
		el, err := unpackAfter(base, k)
		if err != nil || len(el) != 2 {
			return errBadKey
		}
		tag, _ := entryTag(v)
		cands = append(cands, Candidate{ID: el[1].(string), STime: fromMS(el[0].(int64)), Tag: tag})
		keys = append(keys, append([]byte(nil), k...))
		return nil
	})
	if err != nil || len(cands) == 0 {
		return nil, nil, err
	}
	return keys[pickIndex(fn, cands)], nil, nil
}

// pickIndex calls fn, taking the first candidate when its answer is out of range.
func pickIndex(fn func([]Candidate) int, cands []Candidate) int {
	i := fn(cands)
	if i < 0 || i >= len(cands) {
		return 0
	}
	return i
}

// fromMS converts a stored stime back to a time; 0 is the zero time.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// indexBatch is how many pending entries one IndexPending transaction visits.
const indexBatch = 500

// IndexPending adds to the tag index every pending job of typ that lacks
// an entry (enqueued by a queue without Options.Tag, e.g. an older
// version of the program) and returns how many it indexed. It does nothing
// when the queue does not tag. Call it once at start; stale index entries
// are dropped by Accept as it meets them.
func (q *Queue) IndexPending(ctx context.Context, typ string) (int, error) {
	if q.opts.Tag == nil {
		return 0, nil
	}
	total := 0
	base := q.l.pendingType(typ)
	begin := base
	end := kv.PrefixEnd(base)
	for {
		var last []byte
		n, seen := 0, 0
		err := q.Transact(ctx, func(tx *Tx) error {
			last, n, seen = nil, 0, 0
			type entry struct {
				stime int64
				id    string
				v     []byte
			}
			var found []entry
			err := tx.t.Range(begin, end, kv.RangeOptions{Limit: indexBatch}, func(k, v []byte) error {
				el, err := unpackAfter(base, k)
				if err != nil || len(el) != 2 {
					return errBadKey
				}
				found = append(found, entry{el[0].(int64), el[1].(string), append([]byte(nil), v...)})
				last = append(last[:0], k...)
				return nil
			})
			if err != nil {
				return err
			}
			seen = len(found)
			for _, e := range found {
				if tag, ok := entryTag(e.v); ok {
					tk := q.l.tagged(typ, tag, e.stime, e.id)
					if v, err := tx.t.Get(tk); err != nil {
						return err
					} else if v == nil {
						tx.t.Set(tk, nil)
						n++
					}
					continue
				}
				r, err := q.readRow(tx.t, typ, e.id)
				if err != nil {
					return err
				}
				if r == nil || r.state != rowPending || r.stime != e.stime {
					continue // a stale entry: Accept drops it
				}
				if err := tx.setPending(typ, e.id, r, e.stime, nil); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if seen < indexBatch {
			return total, nil
		}
		begin = kv.PrefixEnd(last)
	}
}
