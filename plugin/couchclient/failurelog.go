package couchclient

import (
	"sync"
	"time"

	"github.com/couchepi/couchepi/internal/repeatlog"
)

// failureLines keeps a client's failed responses, each counted in
// PoolStats.ResponsesFailure, to one log line a minute, so that every
// rise of the counter an operator alerts on has a line saying why.
type failureLines struct {
	mu       sync.Mutex
	lines    repeatlog.Failures
	unlogged int // failures since the last line
}

// add counts a failure at now; it reports whether to log it and how many
// went unlogged before it.
func (l *failureLines) add(now time.Time) (logIt bool, unlogged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	logIt, _, _ = l.lines.Fail(now)
	if !logIt {
		l.unlogged++
		return false, 0
	}
	unlogged, l.unlogged = l.unlogged, 0
	return true, unlogged
}
