package jobs

import (
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Picking from a window of the pending queue.
//
// etcd counts every key of a range it is asked for, even when it returns
// only the first few, so "read up to pickBatch due jobs" costs time in
// proportion to the whole queue there (16 ms per accept with 100k pending
// on a loopback cluster). Job ids are replication ids, which start with a
// hex digest, so a random slice of the hex id space holds a random sample
// of the always-due (stime 0) jobs, and reading one slice costs in
// proportion to the slice. A queue reads windows for a type once a full
// pick saw a full batch (the queue is big), and stops for good when both
// window sizes come back empty while the queue is big (its ids are not
// hex). Windows only choose where to look: every key they return is a due
// pending entry, as a full scan's are.

const (
	windowSpace = 1 << 16 // ids' first four hex digits
	// windowEnd sorts after every id that starts with a lowercase hex
	// digit, closing the last window.
	windowEnd = "g"
)

// windowWidths are the window sizes tried in turn: 1/256 of the id space
// (about 400 jobs at 100k pending), then 1/16.
var windowWidths = []int{windowSpace / 256, windowSpace / 16}

// windowMode is what a queue knows about picking a type through windows.
type windowMode uint8

const (
	windowsUnknown windowMode = iota // small so far: full scans are cheap
	windowsUsed                      // big, and windows find jobs
	windowsUseless                   // big, but its ids are not hex
)

// tagsTTL is how long a big queue's list of tags is used before it is
// read again (in the background, the old list still in use), and so about
// how long a new tag may wait to be offered.
const tagsTTL = time.Second

// windowModes holds a queue's windowMode per job type, and the tags of its
// big tagged types.
type windowModes struct {
	mu         sync.Mutex
	m          map[string]windowMode
	tags       map[string]listedTags
	refreshing map[string]bool
}

type listedTags struct {
	tags []string
	at   time.Time
}

func (w *windowModes) get(typ string) windowMode {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[typ]
}

func (w *windowModes) set(typ string, m windowMode) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]windowMode)
	}
	if w.m[typ] != windowsUseless {
		w.m[typ] = m
	}
}

// listTags remembers the tags of a big type (nil: the type is not big).
func (w *windowModes) listTags(typ string, tags []string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if tags == nil {
		delete(w.tags, typ)
		return
	}
	if w.tags == nil {
		w.tags = make(map[string]listedTags)
	}
	w.tags[typ] = listedTags{tags, now}
}

// listedTags returns the tags of a big type, nil when none are listed,
// and whether they were listed less than tagsTTL ago.
func (w *windowModes) listedTags(typ string, now time.Time) (tags []string, fresh bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lt, ok := w.tags[typ]
	if !ok {
		return nil, false
	}
	return lt.tags, now.Sub(lt.at) < tagsTTL && !now.Before(lt.at)
}

// startRefresh claims the refresh of typ's tags; false when one runs.
func (w *windowModes) startRefresh(typ string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refreshing[typ] {
		return false
	}
	if w.refreshing == nil {
		w.refreshing = make(map[string]bool)
	}
	w.refreshing[typ] = true
	return true
}

func (w *windowModes) endRefresh(typ string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.refreshing, typ)
}

// window returns a random window of width ids of [keyAt(lo), keyAt(hi))
// for hex ids lo < hi.
func window(width int, keyAt func(id string) []byte) (begin, end []byte) {
	x := mrand.IntN(windowSpace - width + 1)
	hi := windowEnd
	if x+width < windowSpace {
		hi = fmt.Sprintf("%04x", x+width)
	}
	return keyAt(fmt.Sprintf("%04x", x)), keyAt(hi)
}

// windowPick picks one key at random among those of a random window of
// [keyAt(lo), keyAt(hi)) for hex ids lo < hi; nil when the windows tried
// are empty.
func windowPick(scan scanFunc, keyAt func(id string) []byte) ([]byte, error) {
	picks, err := windowSamples(oneByOne(scan), []func(id string) []byte{keyAt}, 1)
	if err != nil || len(picks[0]) == 0 {
		return nil, err
	}
	return picks[0][0], nil
}

// windowSamples picks up to n keys at random, in random order, from a
// random window of each of several id spaces at once: each window size is
// read for every space still without a pick in one scan.
func windowSamples(scan scanManyFunc, keyAts []func(id string) []byte, n int) ([][][]byte, error) {
	picks := make([][][]byte, len(keyAts))
	left := make([]int, len(keyAts)) // the spaces not picked from yet
	for i := range left {
		left[i] = i
	}
	for _, width := range windowWidths {
		if len(left) == 0 {
			break
		}
		rs := make([]kv.RangeRequest, len(left))
		for j, i := range left {
			begin, end := window(width, keyAts[i])
			rs[j] = kv.RangeRequest{Begin: begin, End: end, Opt: kv.RangeOptions{Limit: pickBatch, KeysOnly: true}}
		}
		seen := make([]int, len(left))
		err := scan(rs, func(j int, k, _ []byte) error {
			// Reservoir sampling, copying only the keys kept.
			seen[j]++
			p := &picks[left[j]]
			if seen[j] <= n {
				*p = append(*p, append([]byte(nil), k...))
			} else if r := mrand.IntN(seen[j]); r < n {
				(*p)[r] = append((*p)[r][:0], k...)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		rest := left[:0]
		for _, i := range left {
			if picks[i] == nil {
				rest = append(rest, i)
			}
		}
		left = rest
	}
	for _, p := range picks {
		mrand.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	}
	return picks, nil
}
