// Package repeatlog keeps a failure that repeats (a store that stays
// unreachable, a catch-up that keeps failing) to one log line per
// interval with a count, instead of one per attempt.
package repeatlog

import "time"

// Failures counts one kind of repeated failure. The zero value logs the
// first failure and then one per minute.
type Failures struct {
	// Every is how often a failure that goes on is logged again; 0 means
	// a minute.
	Every time.Duration

	count  int
	first  time.Time
	logged time.Time
}

// Fail counts a failure at now and reports whether to log it (the first
// of a run, then once per Every), with the failures so far in this run
// and how long the run has lasted.
func (f *Failures) Fail(now time.Time) (log bool, count int, lasted time.Duration) {
	every := f.Every
	if every <= 0 {
		every = time.Minute
	}
	f.count++
	if f.count == 1 {
		f.first = now
	}
	if f.count == 1 || now.Sub(f.logged) >= every {
		f.logged = now
		return true, f.count, now.Sub(f.first)
	}
	return false, f.count, now.Sub(f.first)
}

// Recover ends a run of failures at now, returning how many there were and
// how long the run lasted (0, 0 when there was none): log the recovery
// when count > 0.
func (f *Failures) Recover(now time.Time) (count int, lasted time.Duration) {
	count = f.count
	if count > 0 {
		lasted = now.Sub(f.first)
	}
	f.count = 0
	return count, lasted
}

// Count returns the failures of the current run.
func (f *Failures) Count() int { return f.count }
