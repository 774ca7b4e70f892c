package jobs

import "github.com/couchepi/couchepi/plugin/kv"

// PrefetchJobs reads the rows of the jobs ids of type typ, the type's
// timeout (which Add reads) and the store keys also (the caller's own,
// read through tx.KV()), all at once where the store can (kv.PrefetchTx:
// etcd), so that the transaction's reads of them that follow need no
// round trip each. It adds nothing to what the transaction depends on. A
// caller about to add or replace many jobs in one transaction (the
// frontend applying a batch of docs) calls it first: without it, each job
// cost an etcd round trip before the commit.
func (tx *Tx) PrefetchJobs(typ string, ids []string, also ...[]byte) error {
	pre, ok := tx.t.(kv.PrefetchTx)
	if !ok || len(ids)+len(also) == 0 {
		return nil
	}
	keys := make([][]byte, 0, len(ids)+len(also)+1)
	keys = append(keys, also...)
	keys = append(keys, tx.q.l.timeout(typ))
	for _, id := range ids {
		keys = append(keys, tx.q.l.job(typ, id))
	}
	return pre.Prefetch(keys...)
}

// PrefetchHeld reads what Update, Finish and Resubmit read of the running
// jobs js (their rows, and for jobs held under a lease their holders and
// the lease) and the store keys also, all at once where the store can
// (kv.PrefetchTx: etcd). It adds nothing to what the transaction depends
// on. A caller updating many running jobs in one transaction (a group
// commit of their records) calls it first: without it each job cost two
// etcd round trips before the commit.
func (tx *Tx) PrefetchHeld(js []*Job, also ...[]byte) error {
	pre, ok := tx.t.(kv.PrefetchTx)
	if !ok || len(js)+len(also) == 0 {
		return nil
	}
	keys := make([][]byte, 0, 2*len(js)+len(also)+1)
	keys = append(keys, also...)
	leases := map[string]bool{}
	for _, j := range js {
		keys = append(keys, tx.q.l.job(j.Type, j.ID))
		if j.lease != nil {
			keys = append(keys, tx.q.l.holder(j.Type, j.ID))
			if !leases[j.lease.id] {
				leases[j.lease.id] = true
				keys = append(keys, tx.q.l.lease(j.lease.id))
			}
		}
	}
	return pre.Prefetch(keys...)
}
