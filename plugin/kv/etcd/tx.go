package etcd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/couchepi/couchepi/plugin/kv"
	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// tx is one attempt of a transaction: reads at revision rev, writes
// buffered until commit. Invariant: every value a read returned is covered
// by points or spans, unless it came from a snapshot read.
type tx struct {
	s   *Store
	ctx context.Context
	rev int64 // read revision; 0 until the first read
	// slow counts the runs before this one whose commit ran out of its
	// deadline; the commit's deadline grows with it (attemptTimeout).
	slow int

	writes map[string]write // pending writes by user key
	points map[string]int64 // user key -> ModRevision seen at rev (0: absent)
	// seen holds the pairs reads returned (all at rev; nil: a key read
	// absent), so a Get or AddReadConflictKey of one of them needs no round
	// trip, and a retry at the same revision reuses them. Keys-only range
	// reads are not in it: their pairs have no value.
	seen  map[string]*mvccpb.KeyValue
	spans []span // user-key ranges read; no key in them may change

	stamp *kv.Versionstamp // versionstamp placeholder; nil until asked for

	err error // first error of a method that cannot return one
}

type write struct {
	value []byte
	del   bool
}

// span is [begin, end) in user keys; end nil means no upper bound.
type span struct{ begin, end []byte }

func (s *Store) newTx(ctx context.Context) *tx {
	return &tx{s: s, ctx: ctx, writes: map[string]write{}, points: map[string]int64{}, seen: map[string]*mvccpb.KeyValue{}}
}

func (t *tx) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// readErr turns a read failure into ErrConflict when retrying at a new
// revision will cure it.
func readErr(err error) error {
	if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrFutureRev) {
		return fmt.Errorf("kv/etcd: read revision gone (%v): %w", err, kv.ErrConflict)
	}
	return fmt.Errorf("kv/etcd: read: %w", err)
}

// get reads one etcd key at the transaction's revision.
func (t *tx) get(key string) (*mvccpb.KeyValue, error) {
	if kvp, ok := t.seen[key]; ok {
		return kvp, nil
	}
	resp, err := t.read(key)
	if err != nil {
		return nil, err
	}
	var kvp *mvccpb.KeyValue
	if len(resp.Kvs) > 0 {
		kvp = resp.Kvs[0]
	}
	t.seen[key] = kvp // nil: absent at rev
	return kvp, nil
}

// read sends one range request at the transaction's revision. The first
// read of a transaction is linearizable and fixes the revision; later ones
// name that revision, whose contents are the same on every member that has
// applied it, so they are served by the member the client talks to without
// a round of agreement among members (a serializable read). A member that
// has not applied the revision yet answers ErrFutureRev; the read is then
// sent again linearizably, which waits for the member to catch up.
func (t *tx) read(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	var resp *clientv3.GetResponse
	err := t.sendAtRev(func(extra ...clientv3.OpOption) (*etcdserverpb.ResponseHeader, error) {
		err := t.s.send(t.ctx, func(ctx context.Context) (err error) {
			resp, err = t.s.cli.Get(ctx, key, append(opts[:len(opts):len(opts)], extra...)...)
			return err
		})
		if err != nil {
			return nil, err
		}
		return resp.Header, nil
	})
	return resp, err
}

// sendAtRev sends a read (send adds extra to its options) by read's rule:
// the transaction's first read is linearizable and fixes its revision
// from the answer's header; later ones are serializable at that revision,
// or linearizable at it when the member answers ErrFutureRev.
func (t *tx) sendAtRev(send func(extra ...clientv3.OpOption) (*etcdserverpb.ResponseHeader, error)) error {
	if t.rev == 0 {
		h, err := send()
		if err != nil {
			return readErr(err)
		}
		t.rev = h.Revision
		return nil
	}
	_, err := send(clientv3.WithRev(t.rev), clientv3.WithSerializable())
	if errors.Is(err, rpctypes.ErrFutureRev) {
		_, err = send(clientv3.WithRev(t.rev))
	}
	if err != nil {
		return readErr(err)
	}
	return nil
}

// Get implements kv.ReadTx.
func (t *tx) Get(key []byte) ([]byte, error) {
	if w, ok := t.writes[string(key)]; ok {
		if w.del {
			return nil, nil
		}
		return bytes.Clone(w.value), nil
	}
	kvp, err := t.get(string(t.s.dataPrefix) + string(key))
	if err != nil {
		return nil, err
	}
	if kvp == nil {
		t.points[string(key)] = 0
		return nil, nil
	}
	t.points[string(key)] = kvp.ModRevision
	if kvp.Value == nil {
		return []byte{}, nil
	}
	return kvp.Value, nil
}

// AddReadConflictKey implements kv.SnapshotTx: the commit fails if key
// changed since the transaction's read revision.
func (t *tx) AddReadConflictKey(key []byte) error {
	if _, ok := t.points[string(key)]; ok {
		return nil
	}
	kvp, err := t.get(string(t.s.dataPrefix) + string(key))
	if err != nil {
		return err
	}
	if kvp == nil {
		t.points[string(key)] = 0
	} else {
		t.points[string(key)] = kvp.ModRevision
	}
	return nil
}

// Range implements kv.ReadTx; the range read becomes part of the
// transaction's read set.
func (t *tx) Range(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
	return t.rangeRead(begin, end, opt, true, fn)
}

// SnapshotRange implements kv.SnapshotTx: a range read that does not make
// the commit depend on the range.
func (t *tx) SnapshotRange(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
	return t.rangeRead(begin, end, opt, false, fn)
}

// pageSize is how many pairs one range request asks for. etcd walks the
// whole requested range on every request (it counts the keys), so fewer,
// larger pages are much cheaper than many small ones on big ranges.
const pageSize = 4096

func (t *tx) rangeRead(begin, end []byte, opt kv.RangeOptions, track bool, fn func(k, v []byte) error) error {
	if t.err != nil {
		return t.err
	}
	own := t.ownKeys(begin, end, opt.Reverse)
	return t.merge(t.newPager(begin, end, opt, len(own)), begin, end, own, opt, track, fn)
}

// newPager returns the pager of a range read with own buffered writes in
// the range.
func (t *tx) newPager(begin, end []byte, opt kv.RangeOptions, own int) *pager {
	remote := &pager{t: t, begin: begin, end: end, reverse: opt.Reverse, keysOnly: opt.KeysOnly, page: pageSize}
	if opt.Limit > 0 && opt.Limit+own < pageSize {
		// One request serves the whole limit (the own writes may hide
		// some of the pairs it returns).
		remote.page = opt.Limit + own
	}
	return remote
}

// merge runs a range read of [begin, end): remote's pairs merged with own,
// the buffered writes in the range (in iteration order), which win.
func (t *tx) merge(remote *pager, begin, end []byte, own []string, opt kv.RangeOptions, track bool, fn func(k, v []byte) error) error {
	var last []byte
	n := 0
	exhausted := false
	err := func() error {
		for {
			if opt.Limit > 0 && n >= opt.Limit {
				return nil
			}
			rk, rv, ok, err := remote.peek()
			if err != nil {
				return err
			}
			var k, v []byte
			switch {
			case !ok && len(own) == 0:
				exhausted = true
				return nil
			case ok && len(own) > 0 && bytes.Equal(rk, []byte(own[0])):
				remote.next()
				fallthrough
			case !ok || (len(own) > 0 && before([]byte(own[0]), rk, opt.Reverse)):
				k = []byte(own[0])
				own = own[1:]
				w := t.writes[string(k)]
				if w.del {
					continue
				}
				v = bytes.Clone(w.value)
			default:
				remote.next()
				k, v = rk, rv
			}
			last = k
			n++
			if err := fn(k, v); err != nil {
				return err
			}
		}
	}()
	if track && t.rev != 0 {
		sp := span{begin: begin, end: end}
		if !exhausted && last != nil {
			if opt.Reverse {
				sp.begin = last
			} else {
				sp.end = append(bytes.Clone(last), 0)
			}
		}
		t.spans = append(t.spans, sp)
	}
	return err
}

// before reports whether a sorts before b in the iteration order.
func before(a, b []byte, reverse bool) bool {
	if reverse {
		return bytes.Compare(a, b) > 0
	}
	return bytes.Compare(a, b) < 0
}

// ownKeys returns the buffered keys in [begin, end) in iteration order.
func (t *tx) ownKeys(begin, end []byte, reverse bool) []string {
	var out []string
	for k := range t.writes {
		if k >= string(begin) && (end == nil || k < string(end)) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if reverse {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// pager reads [begin, end) from etcd at the transaction's revision, a page
// at a time.
type pager struct {
	t          *tx
	begin, end []byte
	reverse    bool
	keysOnly   bool
	page       int
	buf        []*mvccpb.KeyValue
	more, done bool
}

func (p *pager) fill() error {
	key, opts := p.request()
	resp, err := p.t.read(key, opts...)
	if err != nil {
		return err
	}
	p.took((*etcdserverpb.RangeResponse)(resp))
	return nil
}

// request returns the etcd key and options of the pager's next page.
func (p *pager) request() (string, []clientv3.OpOption) {
	dp := string(p.t.s.dataPrefix)
	var etcdEnd string
	if p.end == nil {
		etcdEnd = string(kv.PrefixEnd(p.t.s.dataPrefix))
	} else {
		etcdEnd = dp + string(p.end)
	}
	order := clientv3.SortAscend
	if p.reverse {
		order = clientv3.SortDescend
	}
	opts := []clientv3.OpOption{clientv3.WithRange(etcdEnd), clientv3.WithLimit(int64(p.page)), clientv3.WithSort(clientv3.SortByKey, order)}
	if p.keysOnly {
		// etcd then answers from its in-memory index without reading
		// values from its backend.
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return dp + string(p.begin), opts
}

// took makes resp, the answer to request, the pager's next page.
func (p *pager) took(resp *etcdserverpb.RangeResponse) {
	dp := string(p.t.s.dataPrefix)
	p.buf = resp.Kvs
	p.done = !resp.More
	if !p.keysOnly {
		for _, kvp := range resp.Kvs {
			p.t.seen[string(kvp.Key)] = kvp
		}
	}
	if len(resp.Kvs) > 0 {
		lastKey := resp.Kvs[len(resp.Kvs)-1].Key[len(dp):]
		if p.reverse {
			p.end = bytes.Clone(lastKey)
		} else {
			p.begin = append(bytes.Clone(lastKey), 0)
		}
	}
	if p.page < pageSize {
		p.page *= 2
	}
}

func (p *pager) peek() (k, v []byte, ok bool, err error) {
	if len(p.buf) == 0 {
		if p.done {
			return nil, nil, false, nil
		}
		if err := p.fill(); err != nil {
			return nil, nil, false, err
		}
		if len(p.buf) == 0 {
			p.done = true
			return nil, nil, false, nil
		}
	}
	kvp := p.buf[0]
	v = kvp.Value
	if v == nil {
		v = []byte{}
	}
	return kvp.Key[len(p.t.s.dataPrefix):], v, true, nil
}

func (p *pager) next() { p.buf = p.buf[1:] }

// Set implements kv.Tx.
func (t *tx) Set(key, value []byte) {
	t.writes[string(key)] = write{value: bytes.Clone(value)}
}

// Clear implements kv.Tx.
func (t *tx) Clear(key []byte) {
	t.writes[string(key)] = write{del: true}
}

// ClearRange implements kv.Tx. The keys to delete are those the range
// holds at the read revision (plus this transaction's own writes); the
// range joins the read set, so a key inserted concurrently makes the commit
// retry instead of surviving the clear.
func (t *tx) ClearRange(begin, end []byte) {
	var keys []string
	err := t.Range(begin, end, kv.RangeOptions{}, func(k, _ []byte) error {
		keys = append(keys, string(k))
		return nil
	})
	if err != nil {
		t.fail(err)
		return
	}
	for _, k := range keys {
		t.writes[k] = write{del: true}
	}
}

// Add implements kv.Tx. etcd has no atomic add, so this reads the counter
// (the commit then depends on it) and writes the sum.
func (t *tx) Add(key []byte, delta int64) {
	cur, err := t.Get(key)
	if err != nil {
		t.fail(err)
		return
	}
	var b [8]byte
	copy(b[:], cur)
	n := int64(binary.LittleEndian.Uint64(b[:])) + delta
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	t.Set(key, b[:])
}

// SnapshotRanges implements kv.BatchSnapshotTx: the first page of every
// range comes from one etcd request (a Txn of range reads, which etcd
// serves as one read), so a batch costs one round trip instead of one per
// range; later pages, if any, are read as SnapshotRange reads them.
func (t *tx) SnapshotRanges(rs []kv.RangeRequest, fn func(i int, k, v []byte) error) error {
	if t.err != nil {
		return t.err
	}
	pagers := make([]*pager, len(rs))
	owns := make([][]string, len(rs))
	for i, r := range rs {
		owns[i] = t.ownKeys(r.Begin, r.End, r.Opt.Reverse)
		pagers[i] = t.newPager(r.Begin, r.End, r.Opt, len(owns[i]))
	}
	for start := 0; start < len(pagers); start += maxTxnOps {
		part := pagers[start:min(start+maxTxnOps, len(pagers))]
		resps, err := t.readMany(part)
		if err != nil {
			return err
		}
		for j, r := range resps {
			part[j].took(r)
		}
	}
	for i, r := range rs {
		err := t.merge(pagers[i], r.Begin, r.End, owns[i], r.Opt, false, func(k, v []byte) error { return fn(i, k, v) })
		if err != nil {
			return err
		}
	}
	return nil
}

// Prefetch implements kv.PrefetchTx: keys not yet read nor written by
// the transaction are read at its revision in one Txn, into seen.
func (t *tx) Prefetch(keys ...[]byte) error {
	if t.err != nil {
		return t.err
	}
	var want []string
	for _, k := range keys {
		full := string(t.s.dataPrefix) + string(k)
		if _, ok := t.writes[string(k)]; ok {
			continue
		}
		if _, ok := t.seen[full]; !ok {
			want = append(want, full)
		}
	}
	for start := 0; start < len(want); start += maxTxnOps {
		part := want[start:min(start+maxTxnOps, len(want))]
		resps, err := t.readOps(func(extra ...clientv3.OpOption) []clientv3.Op {
			ops := make([]clientv3.Op, len(part))
			for i, k := range part {
				ops[i] = clientv3.OpGet(k, extra...)
			}
			return ops
		})
		if err != nil {
			return err
		}
		for i, r := range resps {
			var kvp *mvccpb.KeyValue
			if len(r.Kvs) > 0 {
				kvp = r.Kvs[0]
			}
			t.seen[part[i]] = kvp // nil: absent at rev
		}
	}
	return nil
}

// readMany reads the next page of every pager in one Txn.
func (t *tx) readMany(pagers []*pager) ([]*etcdserverpb.RangeResponse, error) {
	return t.readOps(func(extra ...clientv3.OpOption) []clientv3.Op {
		ops := make([]clientv3.Op, len(pagers))
		for i, p := range pagers {
			key, opts := p.request()
			ops[i] = clientv3.OpGet(key, append(opts, extra...)...)
		}
		return ops
	})
}

// readOps sends the reads ops builds (adding extra to each) as one Txn,
// at the transaction's revision as read does.
func (t *tx) readOps(ops func(extra ...clientv3.OpOption) []clientv3.Op) ([]*etcdserverpb.RangeResponse, error) {
	var resp *clientv3.TxnResponse
	err := t.sendAtRev(func(extra ...clientv3.OpOption) (*etcdserverpb.ResponseHeader, error) {
		err := t.s.send(t.ctx, func(ctx context.Context) (err error) {
			resp, err = t.s.cli.Txn(ctx).Then(ops(extra...)...).Commit()
			return err
		})
		if err != nil {
			return nil, err
		}
		return resp.Header, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*etcdserverpb.RangeResponse, len(resp.Responses))
	for i, r := range resp.Responses {
		out[i] = r.GetResponseRange()
	}
	return out, nil
}
