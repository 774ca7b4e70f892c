package replicate

import (
	"fmt"
	"time"
)

// A run that is behind its source (changes read and not written, or the
// source's update_seq ahead of through_seq) and completes no batch for
// Options.StallTimeout has stalled: a feed that stays open and sends
// nothing, a request that never ends, a target that never reads. So has
// a run whose source has said nothing on its feed for StallTimeout past
// the feed's own timeout (liveness.go), whether or not the run knows the
// source is ahead: the source's position may be unknown (an opaque
// update_seq, a pending probe that hangs too). Timeouts
// and retries catch most of these; the stall watch is the backstop that
// makes sure a job never sits "running" while nothing moves (CouchDB's
// users' first complaint). A stalled run ends with an error of kind
// "stalled", so its job restarts visibly (crashing, with the reason).

// DefaultStallTimeout is stall_timeout_sec's default: longer than a
// healthy batch takes even with every request of it retried after
// CouchDB's 30 s connection timeout.
const DefaultStallTimeout = 5 * time.Minute

// ErrStalled is the Error.Kind of a run that stalled.
const ErrStalled = "stalled"

// stallWatch looks at a run from its timers goroutine: it keeps
// behindSince (the run's lag, see Stats.LagSec) and, with a timeout, ends
// a stalled run.
type stallWatch struct {
	r        *run
	timeout  time.Duration // 0: lag only
	feed     time.Duration // the `timeout` the feed asks for
	buffered chan change
	caughtUp int64 // when the run was last seen caught up (Unix ns)
}

func (r *run) newStallWatch(buffered chan change) *stallWatch {
	return &stallWatch{r: r, timeout: r.opts.StallTimeout, feed: feedTimeout(r.rep.ConnectionTimeout), buffered: buffered}
}

// behind reports whether the run has something to replicate it has not:
// changes read and not written, or changes pending at the source. A run
// that handed its slot on (quiet) is waiting its turn, not stalled.
func (r *run) behind(buffered chan change) bool {
	if r.quiet.Load() {
		return false
	}
	if len(buffered) > 0 || r.tracker.busy() {
		return true
	}
	p := r.stats.pendingCount()
	return p != nil && *p > 0
}

// progressed records that a batch completed.
func (r *run) progressed() { r.progressAt.Store(time.Now().UnixNano()) }

// check looks once at now; it returns the run's error when it has stalled.
// It also keeps behindSince: since when the run has been behind (zero
// while it is caught up).
func (w *stallWatch) check(now time.Time) error {
	if err := w.checkSilence(now); err != nil {
		return err
	}
	r := w.r
	if !r.behind(w.buffered) {
		r.behindSince.Store(0)
		w.caughtUp = now.UnixNano()
		return nil
	}
	since := r.behindSince.Load()
	if since == 0 {
		// Behind since this look, or since the change that made it so
		// was read, if that came first.
		at := now.UnixNano()
		if c := r.lastChange.Load(); c > w.caughtUp && c < at {
			at = c
		}
		r.behindSince.Store(at)
		return nil
	}
	still := now.Sub(time.Unix(0, max(since, r.progressAt.Load())))
	if w.timeout <= 0 || still < w.timeout {
		return nil
	}
	r.group.totals.stalls.Add(1)
	what := "changes read and not written"
	if p := r.stats.pendingCount(); p != nil && *p > 0 && len(w.buffered) == 0 && !r.tracker.busy() {
		what = fmt.Sprintf("%d changes pending at the source", *p)
	}
	r.log.Warn("replication stalled: restarting it", "no_progress_for", still.Round(time.Second).String(), "behind", what)
	return newError(ErrStalled, fmt.Sprintf("no batch completed for %s with %s (stall_timeout_sec %d)",
		still.Round(time.Second), what, int(w.timeout/time.Second)), false)
}

// checkSilence returns the run's error when its source has said nothing
// on the feed for the feed's timeout plus StallTimeout (and no batch
// completed meanwhile). A quiet run (slot handed on) waits on no feed.
func (w *stallWatch) checkSilence(now time.Time) error {
	r := w.r
	since := r.unheardSince.Load()
	if w.timeout <= 0 || since == 0 || r.quiet.Load() {
		return nil
	}
	silent := now.Sub(time.Unix(0, since))
	if now.Sub(time.Unix(0, max(since, r.progressAt.Load()))) < w.feed+w.timeout {
		return nil
	}
	r.group.totals.stalls.Add(1)
	r.log.Warn("replication stalled: the source's changes feed says nothing: restarting it",
		"silent_for", silent.Round(time.Second).String(), "feed_timeout", w.feed.String())
	return newError(ErrStalled, fmt.Sprintf("the source's changes feed said nothing for %s, though asked to answer within %s (stall_timeout_sec %d)",
		silent.Round(time.Second), w.feed, int(w.timeout/time.Second)), false)
}
