package couchclient

import (
	"context"
	"errors"
	"sync/atomic"
)

// PoolStats counts what the replications sharing a Pool saw on the wire
// since it was created (monotonic, for Prometheus counters).
type PoolStats struct {
	// Requests is every HTTP request attempt sent (retries included).
	Requests uint64
	// ResponsesSuccess counts attempts that got a response (any status);
	// ResponsesFailure those that did not (connection error, timeout);
	// an attempt its caller cancelled, or its fence kept back, is neither.
	ResponsesSuccess, ResponsesFailure uint64
	// TooManyRequests counts 429 responses.
	TooManyRequests uint64
	// Backoffs counts waits the AIMD rate limiter imposed before a request.
	Backoffs uint64
	// Retries counts attempts repeated after a 408, 5xx or connection failure.
	Retries uint64
	// MaxBackoffs counts requests given up with max_backoff.
	MaxBackoffs uint64
	// ConnectionsCreated counts connections dialled (proxies included):
	// couch_replicator.connection.creates.
	ConnectionsCreated uint64
	// BatchWaits counts batches that waited for their turn to be written
	// to their target server (max_batches_per_host, see Client.BatchTurn).
	BatchWaits uint64
	// HostWaits counts requests that waited for their server's budget
	// (max_requests_per_host, its congestion window or a Retry-After
	// hold; see budget.go).
	HostWaits uint64
	// HostHolds counts 429 and 503 answers whose Retry-After held (or
	// held longer) every request to their server.
	HostHolds uint64
	// HostCuts counts cuts of a server's congestion window after a 429 or 503.
	HostCuts uint64
}

// poolStats are the live counters behind PoolStats.
type poolStats struct {
	requests, responsesSuccess, responsesFailure, tooManyRequests, backoffs, retries, maxBackoffs atomic.Uint64
	connectionsCreated, batchWaits, hostWaits, hostHolds, hostCuts                                atomic.Uint64
}

// Stats returns the pool's counters so far.
func (p *Pool) Stats() PoolStats {
	s := &p.stats
	return PoolStats{
		Requests:           s.requests.Load(),
		ResponsesSuccess:   s.responsesSuccess.Load(),
		ResponsesFailure:   s.responsesFailure.Load(),
		TooManyRequests:    s.tooManyRequests.Load(),
		Backoffs:           s.backoffs.Load(),
		Retries:            s.retries.Load(),
		MaxBackoffs:        s.maxBackoffs.Load(),
		ConnectionsCreated: s.connectionsCreated.Load(),
		BatchWaits:         s.batchWaits.Load(),
		HostWaits:          s.hostWaits.Load(),
		HostHolds:          s.hostHolds.Load(),
		HostCuts:           s.hostCuts.Load(),
	}
}

// countResponse counts one attempt's outcome, and reports whether it
// was a failed response. An attempt the caller's own context ended (a run
// stopped, parked or rotated out closes its feeds and requests) or its
// fence kept from being sent is neither: an operator alerts on failures.
func (s *poolStats) countResponse(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		s.responsesSuccess.Add(1)
	case ctx.Err() != nil, errors.Is(err, ErrFenced):
	default:
		s.responsesFailure.Add(1)
		return true
	}
	return false
}
