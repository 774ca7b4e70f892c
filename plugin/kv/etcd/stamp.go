package etcd

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Versionstamps on etcd (see the package doc): a transaction writes a
// random placeholder where its versionstamp goes, and the commit carries
// its writes once per counter value it may find, each copy guarded by a
// compare on the counter, nested so that etcd applies the first that
// matches. The stamp is thus decided where etcd applies the commit, as a
// sequencer would, and commits of other clients that land between this
// one's last look at the counter and its arrival cost nothing.

// maxSpeculation is how many counter values one commit offers: as many
// other stamp-taking commits as may land between this client learning the
// counter and its commit arriving, minus one, without a retry.
const maxSpeculation = 8

// speculationBytes bounds the bytes of writes a commit copies for
// speculation; bigger commits offer one counter value.
const speculationBytes = 64 << 10

// defaultStampFresh is how long a learned counter value is trusted as the base
// of a commit's offers; an older one is read again first (a serializable
// read, answered by the member the client talks to).
const defaultStampFresh = 50 * time.Millisecond

// stampCounter is the newest versionstamp counter value this Store has
// seen, and when.
type stampCounter struct {
	n  atomic.Uint64
	at atomic.Int64 // unix nanoseconds of the last learn
}

// learn records that the counter was at least n.
func (c *stampCounter) learn(n uint64) {
	c.at.Store(time.Now().UnixNano())
	for {
		cur := c.n.Load()
		if n <= cur || c.n.CompareAndSwap(cur, n) {
			return
		}
	}
}

// learnFrom records the counter in a range response over the counter key.
func (c *stampCounter) learnFrom(r *etcdserverpb.RangeResponse) {
	if r != nil && len(r.Kvs) == 1 && len(r.Kvs[0].Value) == 8 {
		c.learn(binary.BigEndian.Uint64(r.Kvs[0].Value))
	}
}

// stampBase returns the counter value a commit offers the successors of.
func (s *Store) stampBase(ctx context.Context) (uint64, error) {
	if time.Since(time.Unix(0, s.stamps.at.Load())) < s.stampFresh {
		return s.stamps.n.Load(), nil
	}
	var resp *clientv3.GetResponse
	err := s.send(ctx, func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, string(s.vsKey), clientv3.WithSerializable())
		return err
	})
	if err != nil {
		return 0, readErr(err)
	}
	if len(resp.Kvs) == 0 {
		s.stamps.learn(0)
	} else {
		s.stamps.learnFrom((*etcdserverpb.RangeResponse)(resp))
	}
	return s.stamps.n.Load(), nil
}

// initStamps creates the counter key of a new store, or learns its value.
func (s *Store) initStamps(ctx context.Context) error {
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(string(s.vsKey)), "=", 0)).
		Then(clientv3.OpPut(string(s.vsKey), string(counterBytes(0)))).
		Else(clientv3.OpGet(string(s.vsKey))).
		Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		s.stamps.learn(0)
	} else {
		s.stamps.learnFrom(resp.Responses[0].GetResponseRange())
	}
	return nil
}

func counterBytes(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// Versionstamp implements kv.Tx: a random placeholder, replaced in every
// key and value the transaction writes by the versionstamp its commit
// takes. Like FoundationDB's, it is not the stamp itself, so keys written
// with it read back within the transaction with the placeholder in them.
func (t *tx) Versionstamp() kv.Versionstamp {
	if t.stamp == nil {
		p := kv.Placeholder()
		t.stamp = &p
	}
	return *t.stamp
}

// stamped returns b with the placeholder replaced by vs.
func (t *tx) stamped(b []byte, vs *kv.Versionstamp) string {
	if vs == nil || !bytes.Contains(b, t.stamp[:]) {
		return string(b)
	}
	return string(bytes.ReplaceAll(b, t.stamp[:], vs[:]))
}

// offers returns how many counter values, after base, a commit of t
// offers: its writes are copied once per value, within etcd's operation
// budget (ops per copy) left by cmps compares and speculationBytes.
func (t *tx) offers(cmps, ops int) int {
	size := 0
	for k, w := range t.writes {
		size += len(k) + len(w.value)
	}
	if size*2 > speculationBytes {
		return 1
	}
	return max(1, min(maxSpeculation, (maxTxnOps-cmps)/ops, speculationBytes/max(size, 1)))
}

// stampTaken walks the nested responses of a commit's offers (a Then
// taken on the outer compares) and reports whether one was applied,
// learning the counter value it took; when every offer failed, the
// innermost Else read the counter, which is learned for the retry.
func (s *Store) stampTaken(resp *clientv3.TxnResponse, base uint64) bool {
	rs := resp.Responses
	for i := uint64(1); len(rs) == 1; i++ {
		if r := rs[0].GetResponseRange(); r != nil {
			s.stamps.learnFrom(r)
			return false
		}
		tr := rs[0].GetResponseTxn()
		if tr == nil {
			break
		}
		if tr.Succeeded {
			s.stamps.learn(base + i)
			return true
		}
		rs = tr.Responses
	}
	return false
}
