package jobserver

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// maxBackoffCap bounds max_backoff_penalty_sec as CouchDB does (30 days).
const maxBackoffCap = 30 * 24 * time.Hour

// Backoff is how long a job that crashed errorCount consecutive times waits
// before it may run again: W = Min × 2^min(errorCount, log2(Max) − log2(Min)),
// randomised to [0.75 W, W] (CouchDB 4.x couch_replicator_job). rnd returns a
// uniform int in [0, n); nil uses math/rand.
func Backoff(errorCount int, cfg Config, rnd func(n int64) int64) time.Duration {
	if rnd == nil {
		rnd = rand.Int64N
	}
	minS := max(int64(cfg.MinBackoff/time.Second), 2)
	maxS := int64(min(cfg.MaxBackoff, maxBackoffCap) / time.Second)
	if maxS < minS {
		maxS = minS
	}
	maxExp := int(math.Log2(float64(maxS)) - math.Log2(float64(minS)))
	exp := max(min(errorCount, maxExp), 0)
	w := minS << uint(exp)
	quarter := w / 4
	secs := w*3/4 + 1 + rnd(quarter+1)
	return time.Duration(secs) * time.Second
}

// Heal resets a job's crash streak when its last run was healthy for longer
// than health_threshold: it returns the error count to build on.
func Heal(errorCount int, lastStart, now time.Time, threshold time.Duration) int {
	if !lastStart.IsZero() && now.Sub(lastStart) > threshold {
		return 0
	}
	return errorCount
}

// AppendHistory puts ev in front of the history (newest first) and keeps at
// most maxHistory events.
func AppendHistory(h []jobdata.Event, ev jobdata.Event, maxHistory int) []jobdata.Event {
	if maxHistory < 1 {
		maxHistory = 1
	}
	out := make([]jobdata.Event, 0, min(len(h)+1, maxHistory))
	out = append(out, ev)
	for _, e := range h {
		if len(out) == maxHistory {
			break
		}
		out = append(out, e)
	}
	return out
}
