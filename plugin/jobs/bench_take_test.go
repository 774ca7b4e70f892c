package jobs

import "context"

// takeJobs is how a node of BenchmarkClusterEtcd takes jobs: a batch per
// transaction. (The bench of an older commit, without AcceptMany, takes
// one per Accept.)
func takeJobs(ctx context.Context, q *Queue, l *Lease) ([]*Job, error) {
	return q.AcceptMany(ctx, typ, MaxAcceptBatch, AcceptOptions{Lease: l})
}
