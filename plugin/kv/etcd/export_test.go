package etcd

import "time"

// MaxSpeculation is maxSpeculation, for tests.
const MaxSpeculation = maxSpeculation

// TrustStamps returns cfg with how long a store trusts a learned
// versionstamp counter without reading it again set to d, so that a test
// can make a commit offer stamps from a counter value it knows is stale.
func TrustStamps(cfg Config, d time.Duration) Config {
	cfg.stampFresh = d
	return cfg
}

// CompactRound runs one round of s's compaction loop with candidate, the
// revision its previous round saw, and returns the revision this one saw.
func CompactRound(s *Store, candidate int64) (int64, error) { return s.compactRound(candidate) }

// LeaseTTL returns cfg with the commit markers' lease TTL set to sec
// seconds.
func LeaseTTL(cfg Config, sec int64) Config {
	cfg.leaseTTL = sec
	return cfg
}
