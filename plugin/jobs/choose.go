package jobs

import (
	"bytes"
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
// nothing is due. With Options.Tag it offers one job of each tag (see
// tagCandidates); when no tagged job is due (or the queue does not tag) it
// offers up to pickBatch due jobs in stime order, so jobs left unindexed by
// a queue without Tag still run.
func (tx *Tx) choose(scan scanFunc, typ string, maxS int64, fn func([]Candidate) int) (key, tagKey []byte, err error) {
	l := tx.q.l
	if tx.q.opts.Tag != nil {
		for claims := 0; ; claims++ {
			cands, keys, cached, err := tx.tagCandidates(scan, typ, maxS)
			if err != nil {
				return nil, nil, err
			}
			if len(cands) == 0 {
				break
			}
			i := pickIndex(fn, cands)
			if cached[i] && !tx.q.picks.claim(typ, cands[i].Tag, keys[i]) && claims < maxClaims {
				continue // another acceptor of this queue picked it first
			}
			return l.pending(typ, ms(cands[i].STime), cands[i].ID), keys[i], nil
		}
	}
	cands, keys, err := tx.dueCandidates(scan, typ, maxS)
	if err != nil || len(cands) == 0 {
		return nil, nil, err
	}
	return keys[pickIndex(fn, cands)], nil, nil
}

// chooseMany is choose for AcceptMany (AcceptOptions.ChooseMany): up to
// want picks, fn asked once for each, with the candidates left and those
// taken so far. With Options.Tag the candidates are one due job of each
// tag, as choose offers them, and a tag's next due jobs (read once, when
// the tag is first picked) replace its pick; otherwise, or when no tagged
// job is due, up to pickBatch due jobs in stime order.
func (tx *Tx) chooseMany(scan scanFunc, typ string, maxS int64, want int, fn func(cands, taken []Candidate) int) (keys, tagKeys [][]byte, err error) {
	l := tx.q.l
	var taken []Candidate
	pick := func(cands []Candidate) int {
		i := fn(cands, taken)
		if i < 0 || i >= len(cands) {
			return 0
		}
		return i
	}
	if tx.q.opts.Tag != nil {
		cands, ckeys, cached, err := tx.tagCandidates(scan, typ, maxS)
		if err != nil {
			return nil, nil, err
		}
		base := l.taggedType(typ)
		more := map[string][][]byte{} // the next due entries of each tag picked
		picked := map[string]bool{}
		drop := func(i int) {
			cands = append(cands[:i], cands[i+1:]...)
			ckeys = append(ckeys[:i], ckeys[i+1:]...)
			cached = append(cached[:i], cached[i+1:]...)
		}
		for claims := 0; len(cands) > 0 && len(keys) < want; {
			i := pick(cands)
			c, k := cands[i], ckeys[i]
			if cached[i] && !tx.q.picks.claim(typ, c.Tag, k) && claims < maxClaims {
				claims++
				drop(i) // another acceptor of this queue picked it first
				continue
			}
			keys = append(keys, l.pending(typ, ms(c.STime), c.ID))
			tagKeys = append(tagKeys, k)
			taken = append(taken, c)
			picked[c.ID] = true
			next, read := more[c.Tag]
			if !read {
				err := scan(kv.PrefixEnd(k), kv.PrefixEnd(l.taggedTag(typ, c.Tag)), kv.RangeOptions{Limit: want - len(keys), KeysOnly: true}, func(k, _ []byte) error {
					next = append(next, append([]byte(nil), k...))
					return nil
				})
				if err != nil {
					return nil, nil, err
				}
			}
			replaced := false
			for len(next) > 0 && !replaced {
				nk := next[0]
				next = next[1:]
				tag, stime, id, err := taggedEntry(base, nk)
				if err != nil {
					return nil, nil, err
				}
				if stime > maxS {
					next = nil
					break
				}
				if !picked[id] {
					cands[i], ckeys[i], cached[i] = Candidate{ID: id, STime: fromMS(stime), Tag: tag}, nk, false
					replaced = true
				}
			}
			more[c.Tag] = next
			if !replaced {
				drop(i)
			}
		}
		if len(keys) > 0 {
			return keys, tagKeys, nil
		}
	}
	cands, ckeys, err := tx.dueCandidates(scan, typ, maxS)
	if err != nil {
		return nil, nil, err
	}
	for len(cands) > 0 && len(keys) < want {
		i := pick(cands)
		keys = append(keys, ckeys[i])
		tagKeys = append(tagKeys, nil)
		taken = append(taken, cands[i])
		cands = append(cands[:i], cands[i+1:]...)
		ckeys = append(ckeys[:i], ckeys[i+1:]...)
	}
	return keys, tagKeys, nil
}

// maxClaims bounds how many times one accept picks again because another
// acceptor of the queue claimed its cached pick first; past it the pick
// is read anyway (its transaction decides who takes the job).
const maxClaims = 8

// dueCandidates lists, in due order, up to pickBatch pending jobs of typ
// due by maxS, with their pending keys: the picks of an untagged queue.
func (tx *Tx) dueCandidates(scan scanFunc, typ string, maxS int64) (cands []Candidate, keys [][]byte, err error) {
	l := tx.q.l
	base := l.pendingType(typ)
	err = scan(base, kv.PrefixEnd(l.pendingAt(typ, maxS)), kv.RangeOptions{Limit: pickBatch}, func(k, v []byte) error {
		var stime int64
		var id string
		if err := decodeKey(base, k, &stime, &id); err != nil {
			return err
		}
		tag, _ := entryTag(v)
		cands = append(cands, Candidate{ID: id, STime: fromMS(stime), Tag: tag})
		keys = append(keys, append([]byte(nil), k...))
		return nil
	})
	return cands, keys, err
}

// tagCandidates returns one due job of each tag (up to maxTags tags) and
// their tag index keys: the earliest of each tag, or, in a big queue whose
// tags were listed before, a random always-due job of each from a window
// of its id space (see window.go) or the cache of such picks (picks.go),
// which is the earliest too as long as the tag has always-due jobs, since
// those sort first; cached[i] tells keys[i] came from the cache. A list
// older than tagsTTL is still used while a new one is read in the
// background: on etcd, listing the tags of a big queue costs a count of
// the whole index.
func (tx *Tx) tagCandidates(scan scanFunc, typ string, maxS int64) (cands []Candidate, keys [][]byte, cached []bool, err error) {
	l := tx.q.l
	base := l.taggedType(typ)
	add := func(k []byte, fromCache bool) error {
		tag, stime, id, err := taggedEntry(base, k)
		if err != nil {
			return err
		}
		if stime <= maxS {
			cands = append(cands, Candidate{ID: id, STime: fromMS(stime), Tag: tag})
			keys = append(keys, append([]byte(nil), k...))
			cached = append(cached, fromCache)
		}
		return nil
	}
	now := tx.q.opts.Now()
	if tags, fresh := tx.q.windows.listedTags(typ, now); tags != nil {
		if !fresh {
			tx.q.refreshTags(typ)
		}
		picks, fromCache, err := tx.q.cachedTagPicks(tx.scanMany(scan), typ, tags, now)
		if err != nil {
			return nil, nil, nil, err
		}
		found := false
		for i, k := range picks {
			if k != nil {
				found = true
				if err := add(k, fromCache[i]); err != nil {
					return nil, nil, nil, err
				}
			}
		}
		// A pick is its tag's earliest entry (or an always-due one), so
		// when none is due no listed tag has a due job; the jobs of a tag
		// come up since are offered by choose's scan of the due entries.
		// Listing the tags again would read pickBatch entries in every
		// accept that finds nothing (a wake's extra acceptors: 6 % of the
		// plugin in the 10,000-db fan-in).
		if len(cands) > 0 || found {
			return cands, keys, cached, nil
		}
	}
	tags, big, err := tx.q.readTags(scan, typ, func(k []byte) error { return add(k, false) })
	if err != nil {
		return nil, nil, nil, err
	}
	if !big {
		tags = nil
	}
	tx.q.windows.listTags(typ, tags, now)
	return cands, keys, cached, nil
}

// readTags lists the tags of typ's tag index (up to maxTags), calling
// first, when not nil, with the earliest entry of each. The first read
// takes up to pickBatch entries, which hold every tag of a small queue; a
// big one (big: that read was full) is then read one entry per tag.
func (q *Queue) readTags(scan scanFunc, typ string, first func(k []byte) error) (tags []string, big bool, err error) {
	l := q.l
	base := l.taggedType(typ)
	// visit records the tag of k, the earliest entry of a tag not seen yet.
	visit := func(tag string, k []byte) error {
		tags = append(tags, tag)
		if first != nil {
			return first(k)
		}
		return nil
	}
	n := 0
	var same []byte // the key prefix of the last tag's entries
	err = scan(base, kv.PrefixEnd(base), kv.RangeOptions{Limit: pickBatch, KeysOnly: true}, func(k, _ []byte) error {
		n++
		if same != nil && bytes.HasPrefix(k, same) {
			return nil // decoding every entry cost a burst of accepts O(queue) each
		}
		tag, _, _, err := taggedEntry(base, k)
		if err != nil {
			return err
		}
		same = l.taggedTag(typ, tag)
		return visit(tag, k)
	})
	if err != nil || n < pickBatch {
		return tags, false, err
	}
	for len(tags) < maxTags {
		k, err := firstKey(scan, kv.PrefixEnd(l.taggedTag(typ, tags[len(tags)-1])), kv.PrefixEnd(base))
		if err != nil || k == nil {
			return tags, true, err
		}
		tag, _, _, err := taggedEntry(base, k)
		if err != nil {
			return nil, true, err
		}
		if err := visit(tag, k); err != nil {
			return nil, true, err
		}
	}
	return tags, true, nil
}

// relistTags lists typ's tags again from the previous list, old: a tag
// that came up since sorts into a gap between listed ones, so only the
// gaps are read (on etcd each such read counts only new tags' entries, not
// the whole index, as listing from scratch does), and a listed tag stays
// while it has entries. nil when no tag has any.
func (q *Queue) relistTags(scan scanFunc, typ string, old []string) ([]string, error) {
	l := q.l
	base := l.taggedType(typ)
	var tags []string
	gap := base
	for i := 0; i <= len(old) && len(tags) < maxTags; i++ {
		gapEnd := kv.PrefixEnd(base)
		if i < len(old) {
			gapEnd = l.taggedTag(typ, old[i])
		}
		for len(tags) < maxTags {
			k, err := firstKey(scan, gap, gapEnd)
			if err != nil {
				return nil, err
			}
			if k == nil {
				break
			}
			tag, _, _, err := taggedEntry(base, k)
			if err != nil {
				return nil, err
			}
			tags = append(tags, tag)
			gap = kv.PrefixEnd(l.taggedTag(typ, tag))
		}
		if i == len(old) || len(tags) == maxTags {
			break
		}
		tag := old[i]
		k, err := q.tagPick(scan, typ, tag)
		if err != nil {
			return nil, err
		}
		if k != nil {
			tags = append(tags, tag)
		}
		gap = kv.PrefixEnd(l.taggedTag(typ, tag))
	}
	return tags, nil
}

// refreshTags lists typ's tags again in a transaction of its own, in the
// background; one refresh per type at a time.
func (q *Queue) refreshTags(typ string) {
	if !q.windows.startRefresh(typ) {
		return
	}
	q.mu.Lock()
	select {
	case <-q.closed:
		q.mu.Unlock()
		q.windows.endRefresh(typ)
		return
	default:
	}
	q.wg.Add(1)
	q.mu.Unlock()
	go func() {
		defer q.wg.Done()
		defer q.windows.endRefresh(typ)
		ctx, cancelTimeout := context.WithTimeout(q.ctx, 30*time.Second)
		defer cancelTimeout()
		now := q.opts.Now()
		old, _ := q.windows.listedTags(typ, now)
		var tags []string
		err := q.store.View(ctx, func(t kv.ReadTx) error {
			var err error
			tags, err = q.relistTags(t.Range, typ, old)
			return err
		})
		if err != nil {
			q.log.Debug("listing tags failed; the last list stays in use", "type", typ, "error", err)
			return
		}
		q.windows.listTags(typ, tags, now)
	}()
}

// taggedEntry decodes a tag index key (under base, the type's tag index).
func taggedEntry(base, k []byte) (tag string, stime int64, id string, err error) {
	err = decodeKey(base, k, &tag, &stime, &id)
	return tag, stime, id, err
}

// tagPick returns one entry of tag's index: a random always-due one from a
// window of its id space, else (a small tag, or one with scheduled jobs
// only) its earliest, counting only this tag's entries; nil when the tag
// has none.
func (q *Queue) tagPick(scan scanFunc, typ, tag string) ([]byte, error) {
	samples, earliest, err := q.tagSamples(oneByOne(scan), typ, []string{tag}, 1)
	if err != nil {
		return nil, err
	}
	if len(samples[0]) > 0 {
		return samples[0][0], nil
	}
	return earliest[0], nil
}

// cachedTagPicks returns a pick of each of tags, as tagPick does, taking
// cached picks first (picks.go): only the tags with none cached are read,
// all at once where the store can (kv.BatchSnapshotTx), and their
// windows' samples cached.
// cached[i] tells picks[i] is a cached key, to be claimed if picked.
func (q *Queue) cachedTagPicks(scan scanManyFunc, typ string, tags []string, now time.Time) (picks [][]byte, cached []bool, err error) {
	picks = make([][]byte, len(tags))
	cached = make([]bool, len(tags))
	var missing []string
	var at []int // missing[j] is tags[at[j]]
	for i, tag := range tags {
		if k := q.picks.next(typ, tag, now); k != nil {
			picks[i], cached[i] = k, true
			continue
		}
		missing = append(missing, tag)
		at = append(at, i)
	}
	if len(missing) == 0 {
		return picks, cached, nil
	}
	samples, earliest, err := q.tagSamples(scan, typ, missing, picksKept)
	if err != nil {
		return nil, nil, err
	}
	for j, i := range at {
		if s := samples[j]; len(s) > 0 {
			q.picks.keep(typ, missing[j], s, now)
			picks[i], cached[i] = s[len(s)-1], true // the key next offers
		} else {
			picks[i] = earliest[j]
		}
	}
	return picks, cached, nil
}

// tagSamples returns, for each of tags, up to n random always-due entries
// from windows of its id space, or, for a tag whose windows hold none,
// its earliest entry instead (earliest[i]; nil when it has none).
func (q *Queue) tagSamples(scan scanManyFunc, typ string, tags []string, n int) (samples [][][]byte, earliest [][]byte, err error) {
	keyAts := make([]func(id string) []byte, len(tags))
	for i, tag := range tags {
		keyAts[i] = func(id string) []byte { return q.l.tagged(typ, tag, 0, id) }
	}
	samples, err = windowSamples(scan, keyAts, n)
	if err != nil {
		return nil, nil, err
	}
	earliest = make([][]byte, len(tags))
	var left []int // the tags no window found a job of
	var rs []kv.RangeRequest
	for i := range tags {
		if len(samples[i]) == 0 {
			begin := q.l.taggedTag(typ, tags[i])
			left = append(left, i)
			rs = append(rs, kv.RangeRequest{Begin: begin, End: kv.PrefixEnd(begin), Opt: kv.RangeOptions{Limit: 1, KeysOnly: true}})
		}
	}
	if len(rs) == 0 {
		return samples, earliest, nil
	}
	err = scan(rs, func(j int, k, _ []byte) error {
		earliest[left[j]] = append([]byte(nil), k...)
		return nil
	})
	return samples, earliest, err
}

// scanManyFunc reads several ranges (kv.BatchSnapshotTx's SnapshotRanges).
type scanManyFunc func(rs []kv.RangeRequest, fn func(i int, k, v []byte) error) error

// scanMany returns the batched form of scan, the transaction's snapshot
// range read or its plain one: one request for all ranges where the store
// batches snapshot reads, else scan once per range.
func (tx *Tx) scanMany(scan scanFunc) scanManyFunc {
	if b, ok := tx.t.(kv.BatchSnapshotTx); ok {
		if _, snap := tx.t.(kv.SnapshotTx); snap {
			return b.SnapshotRanges
		}
	}
	return oneByOne(scan)
}

// oneByOne is a scanManyFunc that reads each range with scan in turn.
func oneByOne(scan scanFunc) scanManyFunc {
	return func(rs []kv.RangeRequest, fn func(i int, k, v []byte) error) error {
		for i, r := range rs {
			if err := scan(r.Begin, r.End, r.Opt, func(k, v []byte) error { return fn(i, k, v) }); err != nil {
				return err
			}
		}
		return nil
	}
}

// firstKey returns the first key of the prefix range of begin, or of
// [begin, end) when end is given; nil when it is empty.
func firstKey(scan scanFunc, begin []byte, end ...[]byte) ([]byte, error) {
	e := kv.PrefixEnd(begin)
	if len(end) > 0 {
		e = end[0]
	}
	var key []byte
	err := scan(begin, e, kv.RangeOptions{Limit: 1, KeysOnly: true}, func(k, _ []byte) error {
		key = append([]byte(nil), k...)
		return nil
	})
	return key, err
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
				var e entry
				if err := decodeKey(base, k, &e.stime, &e.id); err != nil {
					return err
				}
				e.v = append([]byte(nil), v...)
				found = append(found, e)
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
