package jobserver

import (
	"github.com/couchepi/couchepi/plugin/jobs"
)

// Choose is fair share's pick among due pending jobs (the candidates the
// queue offers an acceptor; their Tag is the fair-share key, see
// jobdata.ShareTag). It returns the index of the candidate to start:
//
//  1. lowest priority of its key: usage × running jobs / shares², the
//     priority a new job of that key starts with (RFC 017), so a db that
//     used more than its share waits;
//  2. then fewest running jobs per share, so that while no key has usage
//     yet (at start) slots fill in proportion to shares;
//  3. then the oldest scheduled time, then the first offered.
//
// running counts the running jobs of each key.
func Choose(cands []jobs.Candidate, share *Share, running map[string]int, cfg Config) int {
	best := -1
	var bestPrio, bestLoad float64
	for i, c := range cands {
		prio := share.KeyPriority(c.Tag, running[c.Tag], cfg)
		load := float64(running[c.Tag]) / float64(cfg.SharesOf(c.Tag))
		if best >= 0 {
			switch {
			case prio != bestPrio:
				if prio > bestPrio {
					continue
				}
			case load != bestLoad:
				if load > bestLoad {
					continue
				}
			case !c.STime.Before(cands[best].STime):
				continue
			}
		}
		best, bestPrio, bestLoad = i, prio, load
	}
	return max(best, 0)
}

// choose is the acceptors' AcceptOptions.Choose: Choose with the server's
// fair-share state and running jobs, the slots held per key (kept as
// slots are taken and given back: counting them here cost each accept a
// pass over every worker, 10,000 of them with 10,000 replications).
func (s *Server) choose(cands []jobs.Candidate) int {
	cfg := s.config()
	s.mu.Lock()
	defer s.mu.Unlock()
	return Choose(cands, s.share, s.heldByKey, cfg)
}

// chooseNext is the acceptors' AcceptOptions.ChooseMany: choose, counting
// the jobs the accept took already as running, so that one transaction's
// picks spread over the keys as that many accepts one by one would.
func (s *Server) chooseNext(cands, taken []jobs.Candidate) int {
	if len(taken) == 0 {
		return s.choose(cands)
	}
	cfg := s.config()
	s.mu.Lock()
	defer s.mu.Unlock()
	running := make(map[string]int, len(taken))
	for _, c := range taken {
		running[c.Tag]++
	}
	for _, c := range cands {
		if _, ok := running[c.Tag]; !ok {
			running[c.Tag] = 0
		}
	}
	for k := range running {
		running[k] += s.heldByKey[k]
	}
	return Choose(cands, s.share, running, cfg)
}
