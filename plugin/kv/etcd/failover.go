package etcd

import (
	"context"
	"errors"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A member that dies (kill -9, a crash, a partition) takes with it the
// requests it was serving or forwarding to its leader: a write proposed
// through a follower whose leader died waits for an answer that never
// comes, until the caller's deadline. While quorum stands the others
// serve the same request within an election timeout (1 s by default), so
// every request gets a deadline of its own, shorter than the caller's,
// and is sent again — the client's balancer then picks another member —
// when it failed the way a request to a dead or leaderless member does.

// firstAttemptTimeout bounds one etcd request. It doubles every second
// attempt, up to 16 times, so that a request that is merely slow (a large
// range on a loaded machine) still completes; not at every attempt, as
// each attempt sent before a new leader is elected waits out its whole
// deadline, and a failover (election timeout 1 s, at most 2 s before a
// vote) then costs a request about 2 s instead of 1+2+4.
const firstAttemptTimeout = time.Second

// attemptTimeout is the deadline of attempt n (0 first) of one request.
func attemptTimeout(n int) time.Duration {
	return firstAttemptTimeout << min(n/2, 4)
}

// failedOver reports whether a request that failed with err, while ctx
// (the caller's) still has time, may succeed on another member: it ran
// out of its own deadline, or etcd said the member is unavailable (lost
// connection, no leader, leader changed, request timed out in raft).
func failedOver(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}

// send runs req, a request that may be applied twice without harm (a
// read, a lease grant), each attempt with its own deadline, again after a
// failure failedOver accepts, until it succeeds, fails otherwise, or ctx
// or the store ends.
func (s *Store) send(ctx context.Context, req func(ctx context.Context) error) error {
	for n := 0; ; n++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout(n))
		err := req(actx)
		cancel()
		if !failedOver(ctx, err) {
			return err
		}
		if s.closed() {
			return kv.ErrClosed
		}
		backoff(ctx, n)
	}
}
