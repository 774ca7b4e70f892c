package etcd

import "time"

// MaxSpeculation is maxSpeculation, for tests.
const MaxSpeculation = maxSpeculation

// TrustStamps sets how long a learned versionstamp counter is trusted
// without reading it again, so that a test can make a commit offer stamps
// from a counter value it knows is stale; it returns a func restoring it.
func TrustStamps(d time.Duration) (restore func()) {
	old := stampFresh
	stampFresh = d
	return func() { stampFresh = old }
}

// CompactRound runs one round of s's compaction loop with candidate, the
// revision its previous round saw, and returns the revision this one saw.
func CompactRound(s *Store, candidate int64) (int64, error) { return s.compactRound(candidate) }

// SetLeaseTTL sets the commit markers' lease TTL in seconds; it returns a
// func restoring it.
func SetLeaseTTL(sec int64) (restore func()) {
	old := leaseTTL
	leaseTTL = sec
	return func() { leaseTTL = old }
}
