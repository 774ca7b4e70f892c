package frontend

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// The host hands doc writes to the frontend after the write has answered,
// so a client that writes a _replicator doc and at once asks
// _scheduler/docs (Fauxton does, right after "Start Replication") could
// find the doc not yet there. Settle lets such a read see its own writes.

// settlePoll is how often Settle looks again.
const settlePoll = 10 * time.Millisecond

// Settle waits until every replicator db's writes up to its current update
// sequence have become jobs, or until maxWait has passed or ctx ends; it
// reports whether they had. Sequences it cannot compare (not "N" or
// "N-…") count as processed when equal.
func (f *Frontend) Settle(ctx context.Context, maxWait time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	for {
		if f.settled(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(settlePoll):
		}
	}
}

// settled reports whether every replicator db is processed up to its
// current sequence. An error reads as settled (Settle only ever delays),
// except the end of the wait itself: a read cut short by the deadline
// (a loaded machine can reach it before the first read) proves nothing.
func (f *Frontend) settled(ctx context.Context) bool {
	dbs, err := f.cfg.Services.ListDBs(ctx)
	if err != nil {
		return ctx.Err() == nil
	}
	known, err := f.dbSeqs(ctx)
	if err != nil {
		return ctx.Err() == nil
	}
	for _, d := range dbs {
		if !jobdata.IsReplicatorDB(d.Name) || d.UpdateSeq == "" {
			continue
		}
		done := known[d.Name]
		if done.UUID != d.UUID || !seqReached(done.Seq, d.UpdateSeq) {
			if seqNum(d.UpdateSeq) == 0 {
				continue // an empty db has nothing to process
			}
			return false
		}
	}
	return true
}

// seqReached reports whether processed has reached current.
func seqReached(processed, current string) bool {
	if processed == current {
		return true
	}
	p, c := seqNum(processed), seqNum(current)
	return p >= 0 && c >= 0 && p >= c
}

// seqNum is the number a sequence starts with, -1 when none.
func seqNum(s string) int64 {
	s = strings.Trim(s, `"`)
	if i := strings.IndexByte(s, '-'); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
