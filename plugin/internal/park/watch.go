package park

import (
	"github.com/couchepi/couchepi/parse"
)

// Watch follows the changes of one source for a job that stays accepted
// but reads nothing while it has nothing to replicate (a quiet job, see
// package jobserver): the same signals that wake parked jobs, without a
// feed of its own.
type Watch struct {
	w     *Waker
	src   source
	local bool
}

// signal is the change signal of one watched source.
type signal struct {
	ch      chan struct{} // closed at the next change; nil until asked for
	watches int
	broken  bool // the source can no longer be watched
}

// closed is a closed channel, for signals that already fired.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Watch returns a Watch of ep's source, or nil when ep cannot be watched
// (see Watchable). Close it when done.
func (w *Waker) Watch(ep parse.Endpoint, rep *parse.Rep) *Watch {
	src, local, ok := sourceOf(ep, w.local)
	if !ok {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !local && w.feedRefusedLocked(src.server) {
		return nil
	}
	sg := w.signals[src]
	if sg == nil {
		sg = &signal{}
		w.signals[src] = sg
	}
	sg.watches++
	if !local && w.feeds[src.server] == nil && w.ctx != nil {
		w.startFeedLocked(src.server, &entry{ep: ep, rep: rep})
	}
	return &Watch{w: w, src: src, local: local}
}

// Next returns a channel closed at the first change of the source after
// the call, and false when the source can no longer be watched (its
// server's _db_updates became unreadable): the job must then read its
// changes feed. A change made before the call may or may not close it;
// a reader arms Next before it reads the source.
func (x *Watch) Next() (<-chan struct{}, bool) {
	w := x.w
	w.mu.Lock()
	defer w.mu.Unlock()
	sg := w.signals[x.src]
	if sg == nil || sg.broken {
		return closed, false
	}
	if sg.ch == nil {
		sg.ch = make(chan struct{})
	}
	return sg.ch, true
}

// Close ends the Watch (and its server's feed when nothing else needs it).
func (x *Watch) Close() {
	w := x.w
	w.mu.Lock()
	defer w.mu.Unlock()
	sg := w.signals[x.src]
	if sg == nil {
		return
	}
	if sg.watches--; sg.watches <= 0 {
		if sg.ch != nil {
			close(sg.ch)
		}
		delete(w.signals, x.src)
	}
	if !x.local {
		w.stopFeedIfUnusedLocked(x.src.server)
	}
}

// fireLocked signals a change of src to its watches. Callers hold w.mu.
func (w *Waker) fireLocked(src source) {
	if sg := w.signals[src]; sg != nil && sg.ch != nil {
		close(sg.ch)
		sg.ch = nil
	}
}

// fireServerLocked signals a change of every watched source on server,
// and marks them broken when the server can no longer be watched.
// Callers hold w.mu.
func (w *Waker) fireServerLocked(server string, broken bool) {
	for src, sg := range w.signals {
		if src.server != server {
			continue
		}
		if broken {
			sg.broken = true
		}
		w.fireLocked(src)
	}
}
