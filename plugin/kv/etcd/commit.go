package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxTxnOps is etcd's default --max-txn-ops: the most compares, or
// operations, one Txn level may hold.
const maxTxnOps = 128

// errStampTaken is the conflict of a commit all of whose offered
// versionstamps other commits took first; its reads still held.
var errStampTaken = fmt.Errorf("kv/etcd: versionstamp taken by another commit: %w", kv.ErrConflict)

// commit applies t's writes if nothing t read has changed. It returns nil
// once the writes are durable, an error wrapping kv.ErrConflict when they
// were not applied and the transaction should be retried, or another error.
func (s *Store) commit(ctx context.Context, t *tx) error {
	if len(t.writes) == 0 {
		return nil // read-only: the snapshot was consistent
	}
	lease, err := s.leaseID(ctx)
	if err != nil {
		return err
	}
	var base uint64
	if t.stamp != nil {
		if base, err = s.stampBase(ctx); err != nil {
			return err
		}
	}
	marker := string(s.marker) + newMarkerID()
	cmps, ops := t.commitPlan(marker, lease, base)
	start := time.Now()
	// A commit that outlives its deadline (its member died, or lost its
	// leader) is resolved like any other whose answer was lost, then
	// retried: see failover.go.
	cctx, cancel := context.WithTimeout(ctx, attemptTimeout(t.slow))
	defer cancel()
	txn := s.cli.Txn(cctx).If(cmps...).Then(ops...)
	if t.stamp != nil {
		// On a conflict, learn the counter for the retry.
		txn = txn.Else(clientv3.OpGet(string(s.vsKey)))
	}
	resp, err := txn.Commit()
	if err == nil {
		if !resp.Succeeded {
			if t.stamp != nil && len(resp.Responses) == 1 {
				s.stamps.learnFrom(resp.Responses[0].GetResponseRange())
			}
			return fmt.Errorf("kv/etcd: a key read changed before commit: %w", kv.ErrConflict)
		}
		if t.stamp != nil {
			if !s.stampTaken(resp, base) {
				return errStampTaken
			}
		}
		return nil
	}
	switch {
	case tooLarge(err):
		return fmt.Errorf("%w: %d writes: %v", ErrTooLarge, len(t.writes), err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound), errors.Is(err, rpctypes.ErrGRPCLeaseNotFound):
		s.dropLease(lease)
		return fmt.Errorf("kv/etcd: marker lease expired: %w", kv.ErrConflict)
	case definite(err):
		return fmt.Errorf("kv/etcd: commit refused: %w", err)
	}
	if cctx.Err() != nil && ctx.Err() == nil {
		t.slow++
	}
	return s.resolve(marker, lease, start, err)
}

// tooLarge reports whether err refuses a request for its size: etcd's
// --max-request-bytes, or gRPC's bound on a message (2 MiB by default),
// which the client enforces before sending and the server on receipt,
// both as ResourceExhausted; etcd's rate limiting ("too many requests")
// is ResourceExhausted too, and is not this.
func tooLarge(err error) bool {
	switch {
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrGRPCRequestTooLarge):
		return true
	case errors.Is(err, rpctypes.ErrTooManyRequests), errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests):
		return false
	}
	return status.Code(err) == codes.ResourceExhausted
}

// definite reports whether err is one etcd returns before applying
// anything (validation and auth errors), as opposed to a failure whose
// request may still be applied.
func definite(err error) bool {
	for _, e := range []error{
		rpctypes.ErrTooManyOps, rpctypes.ErrGRPCTooManyOps,
		rpctypes.ErrDuplicateKey, rpctypes.ErrGRPCDuplicateKey,
		rpctypes.ErrEmptyKey, rpctypes.ErrGRPCEmptyKey,
		rpctypes.ErrPermissionDenied, rpctypes.ErrGRPCPermissionDenied,
		rpctypes.ErrInvalidAuthToken, rpctypes.ErrGRPCInvalidAuthToken,
		rpctypes.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// resolve learns whether the commit whose marker is marker was applied:
// either the marker exists (it was), or resolve creates it first, which
// makes the commit's own "marker absent" compare fail should the lost
// request still arrive. The marker must be looked at while its lease is
// surely alive, so resolve gives up with ErrUnknownResult after half the
// lease's lifetime.
func (s *Store) resolve(marker string, lease clientv3.LeaseID, start time.Time, cause error) error {
	deadline := start.Add(time.Duration(s.leaseTTL) * time.Second / 2)
	ctx, cancel := context.WithDeadline(s.ctx, deadline)
	defer cancel()
	for attempt := 0; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, attemptTimeout(attempt))
		resp, err := s.cli.Txn(actx).
			If(clientv3.Compare(clientv3.Version(marker), "=", 0)).
			Then(clientv3.OpPut(marker, "aborted", clientv3.WithLease(lease))).
			Else(clientv3.OpGet(marker)).
			Commit()
		acancel()
		if err == nil {
			if resp.Succeeded {
				return fmt.Errorf("kv/etcd: commit not applied (%v): %w", cause, kv.ErrConflict)
			}
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 1 && string(kvs[0].Value) == "" {
				return nil // the commit's own marker: it was applied
			}
			return fmt.Errorf("kv/etcd: commit not applied (%v): %w", cause, kv.ErrConflict)
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) || ctx.Err() != nil {
			return fmt.Errorf("%w: %v (resolving: %v)", ErrUnknownResult, cause, err)
		}
		s.log.Warn("etcd commit outcome unknown; resolving", "error", cause, "attempt", attempt)
		backoff(ctx, attempt+4)
	}
}

// maxCmps bounds the compares of one commit. etcd counts a nested Txn's
// operations against what its parents left of --max-txn-ops, so compares
// cannot be spread over nested levels; past this many, reads are merged
// into covering ranges (see coalesce).
const maxCmps = maxTxnOps / 2

// commitPlan returns the compares that prove t's reads still hold, and the
// operations that apply its writes. With a versionstamp, the operations
// are t's offers: its writes once per counter value after base, each under
// a compare on the counter, nested so that etcd takes the first whose
// compare holds; the innermost Else reads the counter.
func (t *tx) commitPlan(marker string, lease clientv3.LeaseID, base uint64) ([]clientv3.Cmp, []clientv3.Op) {
	s := t.s
	dp, tp := string(s.dataPrefix), string(s.tombPrefix)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Version(marker), "=", 0)}
	points, spans := t.points, t.spans
	if len(cmps)+1+len(points)+2*len(spans) > maxCmps {
		points, spans = nil, coalesce(t.points, t.spans, (maxCmps-len(cmps)-1)/2)
	}
	if len(spans) > 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(string(s.horizonKey)), "<", string(revBytes(t.rev+1))))
	}
	for _, k := range sortedKeys(points) {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(dp+k), "=", points[k]))
	}
	for _, sp := range spans {
		for _, p := range []string{dp, tp} {
			end := string(kv.PrefixEnd([]byte(p)))
			if sp.end != nil {
				end = p + string(sp.end)
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(p+string(sp.begin)), "<", t.rev+1).WithRange(end))
		}
	}
	keys := sortedKeys(t.writes)
	per := 2 // the marker and the counter
	for _, w := range t.writes {
		per++
		if w.del {
			per++ // its tombstone
		}
	}
	writes := func(vs *kv.Versionstamp) []clientv3.Op {
		var ops []clientv3.Op
		for _, k := range keys {
			w := t.writes[k]
			if w.del {
				ops = append(ops, clientv3.OpDelete(dp+t.stamped([]byte(k), vs)), clientv3.OpPut(tp+t.stamped([]byte(k), vs), ""))
			} else {
				ops = append(ops, clientv3.OpPut(dp+t.stamped([]byte(k), vs), t.stamped(w.value, vs)))
			}
		}
		return append(ops, clientv3.OpPut(marker, "", clientv3.WithLease(lease)))
	}
	if t.stamp == nil {
		return cmps, pack(writes(nil), maxTxnOps-maxCmps)
	}
	n := t.offers(len(cmps), per)
	offer := []clientv3.Op{clientv3.OpGet(string(s.vsKey))}
	for i := uint64(n); i >= 1; i-- {
		vs := kv.NewVersionstamp(base+i, 0)
		then := append(writes(&vs), clientv3.OpPut(string(s.vsKey), string(counterBytes(base+i))))
		if n == 1 {
			then = pack(then, maxTxnOps-maxCmps)
		}
		at := clientv3.Compare(clientv3.Value(string(s.vsKey)), "=", string(counterBytes(base+i-1)))
		offer = []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{at}, then, offer)}
	}
	return cmps, offer
}

// coalesce turns point reads and spans into at most n spans that cover
// them all. A covering span may hold keys the transaction never read, so a
// change to those also fails the commit: spurious conflicts, never missed
// ones.
func coalesce(points map[string]int64, spans []span, n int) []span {
	all := append([]span(nil), spans...)
	for k := range points {
		all = append(all, span{begin: []byte(k), end: append([]byte(k), 0)})
	}
	sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i].begin, all[j].begin) < 0 })
	per := (len(all) + n - 1) / n
	var out []span
	for i := 0; i < len(all); i += per {
		g := all[i:min(i+per, len(all))]
		cover := span{begin: g[0].begin, end: g[0].end}
		for _, sp := range g[1:] {
			if cover.end != nil && (sp.end == nil || bytes.Compare(sp.end, cover.end) > 0) {
				cover.end = sp.end
			}
		}
		out = append(out, cover)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pack fits ops into one Txn level allowed budget operations: when there
// are more, it groups them into nested Txns (no compares, so they always
// apply), recursively. etcd checks a nested Txn against what its parent
// left of the budget, so a level of k groups leaves each group budget-k.
// etcd applies the whole tree atomically.
func pack(ops []clientv3.Op, budget int) []clientv3.Op {
	if len(ops) <= budget {
		return ops
	}
	k := budget / 2
	per := (len(ops) + k - 1) / k
	var out []clientv3.Op
	for i := 0; i < len(ops); i += per {
		out = append(out, clientv3.OpTxn(nil, pack(ops[i:min(i+per, len(ops))], budget-k), nil))
	}
	return out
}
