package jobserver

import (
	"sort"
	"time"
)

// Worker is what the scheduling policy knows of a running job.
type Worker struct {
	ID         string
	Continuous bool
	Started    time.Time
	Priority   float64 // fair-share priority: higher runs less (stopped first)
}

// Trim picks the workers to stop when more than maxJobs run (the rotation
// step of CouchDB 4.x's job server): continuous jobs that ran at least
// minRunTime, most over their fair share first, then the oldest start
// first. One-shot (and young) jobs are stopped only when lowered is set
// (max_jobs was lowered), and then only after every eligible continuous job.
func Trim(workers []Worker, maxJobs int, minRunTime time.Duration, now time.Time, lowered bool) []string {
	excess := len(workers) - maxJobs
	if excess <= 0 {
		return nil
	}
	var cands, rest []Worker
	for _, w := range workers {
		if w.Continuous && now.Sub(w.Started) >= minRunTime {
			cands = append(cands, w)
		} else {
			rest = append(rest, w)
		}
	}
	order(cands)
	if lowered {
		order(rest)
		cands = append(cands, rest...)
	}
	if len(cands) > excess {
		cands = cands[:excess]
	}
	ids := make([]string, len(cands))
	for i, w := range cands {
		ids[i] = w.ID
	}
	return ids
}

// order sorts workers in stop order: highest fair-share priority, then oldest start, then id.
func order(cands []Worker) {
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].Priority != cands[j].Priority {
			return cands[i].Priority > cands[j].Priority
		}
		if !cands[i].Started.Equal(cands[j].Started) {
			return cands[i].Started.Before(cands[j].Started)
		}
		return cands[i].ID < cands[j].ID
	})
}

// ChurnSlots is the most extra acceptors the interval step may start so that
// pending jobs rotate in: bounded by what churn is left this interval and by
// max_jobs running jobs and acceptors plus one rotation slot per running
// job (each job started beyond max_jobs pushes a running one out, so with
// nothing running, as with max_jobs = 0, nothing starts beyond max_jobs).
func ChurnSlots(maxJobs, maxChurn, churn, acceptors, workers int) int {
	churnLeft := maxChurn - churn
	slots := maxJobs + min(maxChurn, workers) - (acceptors + workers)
	return max(0, min(churnLeft, slots))
}

// ExtraAcceptors is how many acceptors the interval step starts given the
// number of due pending jobs (counted up to ChurnSlots).
func ExtraAcceptors(maxJobs, maxChurn, churn, acceptors, workers, pending int) int {
	return max(0, min(ChurnSlots(maxJobs, maxChurn, churn, acceptors, workers), pending))
}

// WantAcceptors is how many acceptors should wait for jobs outside the
// interval step: max_acceptors while acceptors + workers < max_jobs.
func WantAcceptors(maxJobs, maxAcceptors, workers int) int {
	return max(0, min(maxAcceptors, maxJobs-workers))
}
