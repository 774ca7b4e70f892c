package jobserver

import (
	"context"
	"sync"
	"time"

	"github.com/couchepi/couchepi/internal/repeatlog"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// Jobs whose record a newer version wrote (jobdata.ErrNewerFormat), met
// by a node of an older one during a rolling upgrade or after a rollback.

// stranded keeps the warning about jobs of a newer format that no live
// node runs to one line per interval.
type stranded struct {
	mu  sync.Mutex
	log repeatlog.Failures
}

// leaveNewer gives back, untouched, a job whose record a newer version
// wrote (record format f): this node would misread it, and writing it
// back would drop what that version added. It is due again after a
// scheduler interval, for any node; a node of that version runs it.
func (w *worker) leaveNewer(f int) {
	s := w.s
	runner := ""
	for _, l := range s.q.Leases() {
		if l.Format >= f {
			runner = l.Node
			break
		}
	}
	if runner != "" {
		s.stranded.mu.Lock()
		s.stranded.log.Recover(s.now())
		s.stranded.mu.Unlock()
		s.log.Debug("job record written by a newer version; left for a node of that version", "job", w.job.ID, "format", f, "runs_up_to", jobdata.Format, "runner", runner)
	} else {
		s.stranded.mu.Lock()
		log, n, lasted := s.stranded.log.Fail(s.now())
		s.stranded.mu.Unlock()
		if log {
			s.log.Warn("job records written by a newer version, and no live node runs their format: they wait for one (a node of that version, or an edit of their doc, which writes a fresh record)",
				"job", w.job.ID, "format", f, "runs_up_to", jobdata.Format, "jobs_given_back", n, "since", lasted.Round(time.Second).String())
		}
	}
	s.settled("leave newer", w.job, s.q.Resubmit(context.Background(), w.job, s.now().Add(s.config().Interval), nil))
}
