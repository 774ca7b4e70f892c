package replicate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// Rounds of runs of one Group reading one source share their reads. In a fan-out, one
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

// sharedRows bounds the rows a window keeps (the oldest go first);
// sharedTotalRows the rows of all windows (about 100 bytes each).
const (
	sharedRows      = 1024
	sharedTotalRows = 64 << 10
)

// window is the recent changes of one source.
type window struct {
	since json.RawMessage // the seq the first row follows
	rows  []change
	// endChanged is the signal armed before the read that reached the end.
	endChanged <-chan struct{}
}

// changeWindows are the windows of a Group's sources, by sharedKey.
type changeWindows struct {
	mu      sync.Mutex
	windows map[string]*window
	rows    int // in all windows
	// reads are the reads of changes under way, by key, since and the
	// signal armed: the runs signalled by one write ask at once, and
	// those armed with the same signal wait for the first one's read
	// instead of each sending their own (see join). Runs armed with the
	// next signal while a read under the previous one is under way share
	// a read of their own.
	reads map[readKey]*windowRead
}

// readKey names a read under way: the source's sharedKey, the seq it
// reads after and the signal armed before it.
type readKey struct {
	key, since string
	changed    <-chan struct{}
}

// windowRead is a read of changes; done is closed once its rows are in
// the window and in rows (ok), or it failed (!ok).
type windowRead struct {
	done chan struct{}
	rows []change // set before done is closed
	ok   bool
}

// result returns the read's rows once done is closed; false when it failed.
func (f *windowRead) result() ([]change, bool) { return f.rows, f.ok }

// join returns the read of key's changes after since under way with the
// same signal armed, to wait for (lead non-nil: its rows serve the
// caller even when the signal fires meanwhile, for the read was sent
// after it was armed); or, when none is, makes the caller's read the one
// others wait for (finish non-nil: call it with the read's rows once they
// are put, ok false when it failed). Both are nil when the signal
// already fired (the caller reads alone).
func (cw *changeWindows) join(key string, since json.RawMessage, changed <-chan struct{}) (lead *windowRead, finish func(rows []change, ok bool)) {
	if isClosed(changed) {
		return nil, nil
	}
	k := readKey{key, string(since), changed}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if f := cw.reads[k]; f != nil {
		return f, nil
	}
	if cw.reads == nil {
		cw.reads = map[readKey]*windowRead{}
	}
	f := &windowRead{done: make(chan struct{})}
	cw.reads[k] = f
	var once sync.Once
	return nil, func(rows []change, ok bool) {
		once.Do(func() {
			cw.mu.Lock()
			delete(cw.reads, k)
			cw.mu.Unlock()
			f.rows, f.ok = rows, ok
			close(f.done)
		})
	}
}

// sharedKey names what the reader reads, for sharing: the source endpoint
// (srcKey: with its credentials, hashed, so runs of different users do
// not share) and the feed style. "" when the reader's reads are not
// shareable (filtered ones).
func (r *changesReader) sharedKey() string {
	if r.clientFilter {
		return ""
	}
	return sharedKeyOf(r.rep, r.srcKey)
}

// sharedKeyOf is the sharedKey of the changes of rep's source, srcKey its
// endpointKey.
func sharedKeyOf(rep *parse.Rep, srcKey string) string {
	if rep.DocIDs != nil || len(rep.Selector) > 0 || rep.Filter != "" || srcKey == "" {
		return ""
	}
	if rep.WinningRevsOnly {
		return srcKey + "\x00main_only"
	}
	return srcKey + "\x00all_docs"
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

// get returns at most limit changes after since from key's window, and
// whether they reach the source's end for a reader armed with changed. ok
// is false when since is not in the window.
func (cw *changeWindows) get(key string, since json.RawMessage, changed <-chan struct{}, limit int) (rows []change, atEnd, ok bool) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	w := cw.windows[key]
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

// after returns how many docs have changes after since in key's window,
// the window's last seq, and whether that is the source's end (no change
// signalled since the read that reached it); ok is false when since is
// not in the window.
func (cw *changeWindows) after(key string, since json.RawMessage) (docs int64, end json.RawMessage, atEnd, ok bool) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	w := cw.windows[key]
	if w == nil {
		return 0, nil, false, false
	}
	i := w.find(since)
	if i < 0 {
		return 0, nil, false, false
	}
	ids := make(map[string]bool, len(w.rows)-i)
	for _, c := range w.rows[i:] {
		ids[c.ID] = true
	}
	end = w.since
	if len(w.rows) > 0 {
		end = w.rows[len(w.rows)-1].Seq
	}
	return int64(len(ids)), end, !isClosed(w.endChanged), true
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

// replaceTail makes rows, read with changed armed, w's rows from its i-th
// on (i == len(w.rows) extends it), keeping at most sharedRows of the
// newest. Callers hold cw.mu.
func (cw *changeWindows) replaceTail(w *window, i int, rows []change, changed <-chan struct{}) {
	cw.rows -= len(w.rows)
	w.rows = append(w.rows[:i:i], rows...)
	if n := len(w.rows) - sharedRows; n > 0 {
		w.since = w.rows[n-1].Seq
		w.rows = append([]change(nil), w.rows[n:]...)
	}
	cw.rows += len(w.rows)
	w.endChanged = changed
	cw.bound()
}

// put records a read of every change after since up to the source's
// end, made with changed armed: it extends key's window when since is its
// end, and starts a new one when since is not in it.
func (cw *changeWindows) put(key string, since json.RawMessage, rows []change, changed <-chan struct{}) {
	if isClosed(changed) {
		return
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.windows == nil {
		cw.windows = map[string]*window{}
	}
	w := cw.windows[key]
	if w != nil {
		switch i := w.find(since); {
		case i == len(w.rows):
			cw.replaceTail(w, i, rows, changed)
			return
		case i >= 0 && isClosed(w.endChanged):
			// A read from inside the window made after the window's end
			// went stale (its signal fired; this read's is open): its
			// rows are the source as it is now, from since on.
			cw.replaceTail(w, i, rows, changed)
			return
		case i >= 0:
			return // a read from inside the window: it has nothing newer to say
		}
	}
	if len(rows) > sharedRows {
		return
	}
	if w != nil {
		cw.rows -= len(w.rows) + 1
	}
	// An empty window still says "nothing after since" to the others.
	cw.windows[key] = &window{since: since, rows: rows, endChanged: changed}
	cw.rows += len(rows) + 1
	cw.bound()
}

// bound drops windows while the windows hold more than sharedTotalRows
// rows, the ones past their signal first. Callers hold cw.mu.
func (cw *changeWindows) bound() {
	if cw.rows <= sharedTotalRows {
		return
	}
	for _, stale := range []bool{true, false} {
		for k, w := range cw.windows {
			if cw.rows <= sharedTotalRows*3/4 {
				return
			}
			if !stale || isClosed(w.endChanged) {
				cw.rows -= len(w.rows) + 1
				delete(cw.windows, k)
			}
		}
	}
}

// Revisions fetched with _bulk_get are kept for the other runs reading the
// same source (as the same user), by id and requested rev: in a fan-out
// every one of them fetches the same revision of each written doc. A
// revision's body does not change; with latest=true a later fetch could
// answer a newer leaf instead, which reaches every run through its
// changes anyway.

// sharedDocs bounds the revisions kept, sharedDocsBytes their size and
// sharedDocBytes the size of one.
const (
	sharedDocs      = 4096
	sharedDocsBytes = 16 << 20
	sharedDocBytes  = 64 << 10
)

// sharedRevs are the revisions a Group's runs fetched, by revKey.
type sharedRevs struct {
	mu    sync.Mutex
	docs  map[string]json.RawMessage
	order []string // keys, oldest first, from head on
	head  int
	bytes int
	// fetching are the revisions being fetched, each closed once its
	// fetch ended (see claim).
	fetching map[string]chan struct{}
}

// claim makes the caller the fetcher of a revision (mine: call release
// once its fetch ended, kept or not); when another run is fetching it,
// wait is closed once that fetch ended.
func (sr *sharedRevs) claim(key string) (wait <-chan struct{}, mine bool) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if ch := sr.fetching[key]; ch != nil {
		return ch, false
	}
	if sr.fetching == nil {
		sr.fetching = map[string]chan struct{}{}
	}
	sr.fetching[key] = make(chan struct{})
	return nil, true
}

// release ends the caller's fetch of a revision it claimed.
func (sr *sharedRevs) release(key string) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if ch := sr.fetching[key]; ch != nil {
		close(ch)
		delete(sr.fetching, key)
	}
}

// revKey names a revision of a doc of the source named src (endpointKey).
func revKey(src, id, rev string) string { return src + "\x00" + id + "\x00" + rev }

// get returns the kept body of a revision.
func (sr *sharedRevs) get(key string) (json.RawMessage, bool) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	doc, ok := sr.docs[key]
	return doc, ok
}

// put keeps a copy of a revision's body, forgetting the oldest kept
// beyond sharedDocs revisions or sharedDocsBytes.
func (sr *sharedRevs) put(key string, doc json.RawMessage) {
	if len(doc) > sharedDocBytes {
		return
	}
	doc = append(json.RawMessage(nil), doc...)
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.docs == nil {
		sr.docs = map[string]json.RawMessage{}
	}
	if _, ok := sr.docs[key]; ok {
		return
	}
	for (len(sr.docs) >= sharedDocs || sr.bytes+len(doc) > sharedDocsBytes) && sr.head < len(sr.order) {
		old := sr.order[sr.head]
		sr.order[sr.head] = ""
		sr.head++
		sr.bytes -= len(sr.docs[old])
		delete(sr.docs, old)
	}
	if sr.head > len(sr.order)/2 {
		sr.order = append(sr.order[:0], sr.order[sr.head:]...)
		sr.head = 0
	}
	sr.order = append(sr.order, key)
	sr.docs[key] = doc
	sr.bytes += len(doc)
}

// Runs of one source share its update_seq, which changes_pending is
// computed from: each run asks for it every pendingInterval, and the
// thousand runs of a fan-out asked the one source 200 times a second.
// A value read less than updateSeqShare ago is used instead; pending is
// an estimate, CouchDB's included.
const updateSeqShare = time.Second

// sharedUpdateSeqsSweep is the size at which the shared update_seqs drop
// their entries older than updateSeqShare (unused ones: a source read
// more than a second ago is read again anyway).
const sharedUpdateSeqsSweep = 4096

// updateSeqs are the update_seqs a Group's runs read, by endpointKey.
type updateSeqs struct {
	mu sync.Mutex
	m  map[string]updateSeqRead
}

type updateSeqRead struct {
	seq json.RawMessage
	at  time.Time // when the request was sent
}

// sourceUpdateSeq returns the source's update_seq, as this or another run
// of the same source (and user) read it less than updateSeqShare ago, or
// read now.
func (r *run) sourceUpdateSeq(ctx context.Context) (json.RawMessage, error) {
	s := &r.group.seqs
	now := time.Now()
	s.mu.Lock()
	e, ok := s.m[r.srcKey]
	s.mu.Unlock()
	if ok && r.srcKey != "" && now.Sub(e.at) < updateSeqShare {
		return e.seq, nil
	}
	info, err := openDB(ctx, r.src)
	if err != nil {
		return nil, err
	}
	if r.srcKey != "" {
		s.mu.Lock()
		if s.m == nil {
			s.m = map[string]updateSeqRead{}
		}
		if len(s.m) >= sharedUpdateSeqsSweep {
			for k, old := range s.m {
				if now.Sub(old.at) >= updateSeqShare {
					delete(s.m, k)
				}
			}
		}
		s.m[r.srcKey] = updateSeqRead{info.UpdateSeq, now}
		s.mu.Unlock()
	}
	return info.UpdateSeq, nil
}

// Runs of one source share what they learn of its pending changes too.
// Where the source's seqs are opaque, changes_pending is the `pending`
// of `_changes?since=…&limit=0`, and each run of a fan-out asked it every
// pendingInterval (the thousand of them, 200 times a second). A run whose
// seq is in the shared window of recent changes counts the docs in the
// window after it, plus what the source has after the window's end: none
// while no change was signalled since the read that reached it, else
// that end's pending, asked once per source per updateSeqShare.

// pendingProbes are the pending counts a Group's runs asked for, by
// sharedKey and seq.
type pendingProbes struct {
	mu sync.Mutex
	m  map[string]pendingProbe
}

type pendingProbe struct {
	pending int64
	at      time.Time // when the request was sent
}

// sharedPending returns changes_pending for a run at source from the
// shared window (and one shared probe of its end); false when the window
// does not hold source or the probe failed.
func (r *run) sharedPending(ctx context.Context, source json.RawMessage, timeout time.Duration) (*int64, bool) {
	key := sharedKeyOf(r.rep, r.srcKey)
	if key == "" {
		return nil, false
	}
	n, end, atEnd, ok := r.group.changes.after(key, source)
	if !ok {
		return nil, false
	}
	if atEnd {
		return &n, true
	}
	pp := &r.group.pending
	k := key + "\x00" + string(end)
	now := time.Now()
	pp.mu.Lock()
	e, hit := pp.m[k]
	pp.mu.Unlock()
	if !hit || now.Sub(e.at) >= updateSeqShare {
		p, ok := r.probePending(ctx, end, timeout)
		if !ok || p == nil {
			return nil, false
		}
		e = pendingProbe{*p, now}
		pp.mu.Lock()
		if pp.m == nil {
			pp.m = map[string]pendingProbe{}
		}
		if len(pp.m) >= sharedUpdateSeqsSweep {
			for k, old := range pp.m {
				if now.Sub(old.at) >= updateSeqShare {
					delete(pp.m, k)
				}
			}
		}
		pp.m[k] = e
		pp.mu.Unlock()
	}
	n += e.pending
	return &n, true
}
