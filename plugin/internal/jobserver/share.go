package jobserver

import "time"

// Share is CouchDB 3.2+'s fair share across replicator dbs (RFC 017): each
// key (replicator db name, or user name for transient jobs) accumulates
// usage from the run time of its jobs; a running job's priority grows with
// its key's usage × job count / shares², every priority decays each cycle,
// and lower priority runs first. Not safe for concurrent use.
type Share struct {
	usage    map[string]float64 // key -> decayed usage (µs)
	priority map[string]float64 // job id -> priority
}

// NewShare returns an empty fair-share state.
func NewShare() *Share {
	return &Share{usage: map[string]float64{}, priority: map[string]float64{}}
}

// ShareJob is one job as fair share accounts it in a cycle.
type ShareJob struct {
	ID  string
	Key string
	Ran time.Duration // run time within the cycle (0 when it did not run)
}

// Cycle updates usage and priorities after a scheduling interval. running
// lists the jobs that ran during it; jobs no longer known are forgotten.
func (s *Share) Cycle(running []ShareJob, interval time.Duration, cfg Config) {
	charges := map[string]float64{}
	jobs := map[string]int{}
	live := map[string]bool{}
	for _, j := range running {
		charges[j.Key] += float64(min(j.Ran, interval).Microseconds())
		jobs[j.Key]++
		live[j.ID] = true
	}
	for k, u := range s.usage {
		s.usage[k] = u * cfg.UsageCoeff
	}
	for k, c := range charges {
		s.usage[k] += c
	}
	for k, u := range s.usage {
		if u < 1 && charges[k] == 0 {
			delete(s.usage, k)
		}
	}
	for id, p := range s.priority {
		p = float64(int64(p * cfg.PriorityCoeff))
		if p <= 0 || !live[id] {
			delete(s.priority, id)
			continue
		}
		s.priority[id] = p
	}
	for _, j := range running {
		s.priority[j.ID] += s.increment(j.Key, jobs[j.Key], cfg)
	}
}

// increment is the priority added to a running job of key per cycle.
func (s *Share) increment(key string, numJobs int, cfg Config) float64 {
	shares := float64(cfg.SharesOf(key))
	return s.usage[key] * float64(numJobs) / (shares * shares)
}

// Priority returns a job's priority; a job never seen starts at its key's
// current increment, as CouchDB does, so a busy db's new jobs do not jump ahead.
func (s *Share) Priority(id, key string, numJobs int, cfg Config) float64 {
	if p, ok := s.priority[id]; ok {
		return p
	}
	return s.increment(key, max(numJobs, 1), cfg)
}

// KeyPriority is the priority a new job of key starts with while running
// jobs of key run: the increment of a running job (with at least one job
// counted). It orders which pending job starts first.
func (s *Share) KeyPriority(key string, running int, cfg Config) float64 {
	return s.increment(key, max(running, 1), cfg)
}

// Usage returns a key's current usage (µs, decayed).
func (s *Share) Usage(key string) float64 { return s.usage[key] }
