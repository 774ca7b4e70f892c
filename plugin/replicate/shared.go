package replicate

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"sync"

	"github.com/couchepi/couchepi/parse"
)

// Rounds of runs reading one source share their reads. In a fan-out, one
// write signals every run reading the source; the first to read it
// appends the rows to the source's window of recent changes, and the
// others take them from there instead of each asking the source.
//
// A window is a run of consecutive changes, after since. Its end is
// known to be the source's end only while the change signal armed before
// the read that reached it (Slot.Next) has not fired: a write committed
// after that read fires it. So a run whose own armed signal is that same
// open channel is caught up at the window's end, and misses nothing (the
// signal fires for it too, and it reads again); any other run reads on
// from the source after the window's end and extends the window.
//
// Revisions fetched with _bulk_get are shared the same way (docs below),
// keyed by id and rev.

// sharedRows bounds the rows a window keeps (the oldest go first).
const sharedRows = 4096

// sharedSources bounds the sources whose windows are kept.
const sharedSources = 16384

// window is the recent changes of one source.
type window struct {
	since json.RawMessage // the seq the first row follows
	rows  []change
	// endChanged is the signal armed before the read that reached the end.
	endChanged <-chan struct{}
}

var sharedChanges = struct {
	mu      sync.Mutex
	windows map[string]*window
}{windows: map[string]*window{}}

// sharedKey names what the reader reads, for sharing: the source endpoint
// (with its credentials, hashed: runs of different users do not share)
// and the feed style. "" when the reader's reads are not shareable
// (filtered ones).
func (r *changesReader) sharedKey() string {
	rep := r.rep
	if r.clientFilter || rep.DocIDs != nil || len(rep.Selector) > 0 || rep.Filter != "" {
		return ""
	}
	return endpointKey(rep) + "\x00" + map[bool]string{true: "main_only", false: "all_docs"}[rep.WinningRevsOnly]
}

// endpointKey names a replication's source endpoint, credentials
// included, as a hash.
func endpointKey(rep *parse.Rep) string {
	ep, err := json.Marshal(rep.Source)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(ep)
	return string(sum[:])
}

// sharedGet returns at most limit changes after since from key's window,
// and whether they reach the source's end for a reader armed with
// changed. ok is false when since is not in the window.
func sharedGet(key string, since json.RawMessage, changed <-chan struct{}, limit int) (rows []change, atEnd, ok bool) {
	sharedChanges.mu.Lock()
	defer sharedChanges.mu.Unlock()
	w := sharedChanges.windows[key]
	if w == nil {
		return nil, false, false
	}
	i := w.find(since)
	if i < 0 {
		return nil, false, false
	}
	rows = w.rows[i:]
	if len(rows) > limit {
		return rows[:limit], false, true
	}
	return rows, w.endChanged == changed && !isClosed(changed), true
}

// find returns the index of the first row after since, -1 when since is
// not in the window.
func (w *window) find(since json.RawMessage) int {
	if bytes.Equal(since, w.since) {
		return 0
	}
	for i := len(w.rows) - 1; i >= 0; i-- {
		if bytes.Equal(w.rows[i].Seq, since) {
			return i + 1
		}
	}
	return -1
}

// sharedPut records a read of every change after since up to the
// source's end, made with changed armed: it extends key's window when
// since is its end, and starts a new one when since is not in it.
func sharedPut(key string, since json.RawMessage, rows []change, changed <-chan struct{}) {
	if isClosed(changed) {
		return
	}
	sharedChanges.mu.Lock()
	defer sharedChanges.mu.Unlock()
	w := sharedChanges.windows[key]
	if w != nil {
		switch i := w.find(since); {
		case i == len(w.rows):
			w.rows = append(w.rows, rows...)
			if n := len(w.rows) - sharedRows; n > 0 {
				w.since = w.rows[n-1].Seq
				w.rows = append([]change(nil), w.rows[n:]...)
			}
			w.endChanged = changed
			return
		case i >= 0:
			return // a read from inside the window: it has nothing newer to say
		}
	}
	if len(rows) > sharedRows {
		return
	}
	if len(sharedChanges.windows) >= sharedSources {
		for k, w := range sharedChanges.windows {
			if isClosed(w.endChanged) {
				delete(sharedChanges.windows, k)
			}
		}
		if len(sharedChanges.windows) >= sharedSources {
			clear(sharedChanges.windows)
		}
	}
	sharedChanges.windows[key] = &window{since: since, rows: rows, endChanged: changed}
}

// Revisions fetched with _bulk_get are kept for the other runs reading the
// same source (as the same user), by id and requested rev: in a fan-out
// every one of them fetches the same revision of each written doc. A
// revision's body does not change; with latest=true a later fetch could
// answer a newer leaf instead, which reaches every run through its
// changes anyway.

// sharedDocs bounds the revisions kept; sharedDocBytes the size of one.
const (
	sharedDocs     = 4096
	sharedDocBytes = 64 << 10
)

var sharedRevs = struct {
	mu   sync.Mutex
	docs map[string]json.RawMessage
	ring []string // keys in the order they were kept
	next int
}{docs: map[string]json.RawMessage{}}

// revKey names a revision of a doc of the source named src (endpointKey).
func revKey(src, id, rev string) string { return src + "\x00" + id + "\x00" + rev }

// sharedDoc returns the kept body of a revision.
func sharedDoc(key string) (json.RawMessage, bool) {
	sharedRevs.mu.Lock()
	defer sharedRevs.mu.Unlock()
	doc, ok := sharedRevs.docs[key]
	return doc, ok
}

// shareDoc keeps a copy of a revision's body, forgetting the oldest kept
// beyond sharedDocs.
func shareDoc(key string, doc json.RawMessage) {
	if len(doc) > sharedDocBytes {
		return
	}
	doc = append(json.RawMessage(nil), doc...)
	sharedRevs.mu.Lock()
	defer sharedRevs.mu.Unlock()
	if _, ok := sharedRevs.docs[key]; ok {
		return
	}
	if len(sharedRevs.ring) < sharedDocs {
		sharedRevs.ring = append(sharedRevs.ring, key)
	} else {
		delete(sharedRevs.docs, sharedRevs.ring[sharedRevs.next])
		sharedRevs.ring[sharedRevs.next] = key
		sharedRevs.next = (sharedRevs.next + 1) % sharedDocs
	}
	sharedRevs.docs[key] = doc
}
