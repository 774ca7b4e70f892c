package replicate

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestCheckpointFailuresCounted: checkpoints_failure counts, and logs
// once a minute with the run's logger, only checkpoints that really
// failed: not one cut short by the run's own stop (a park, a rotation, a
// doc edit stop the run so), nor one the run's fence kept back because
// the job left this node.
func TestCheckpointFailuresCounted(t *testing.T) {
	s := startServer(t)
	tests := []struct {
		name string
		// fault decides what the proxy does with the run's nth checkpoint
		// write (PUT _local/…, from 1); it calls stop to stop the run,
		// fence to close its fence.
		fault       func(n int, stop, fence func()) fault
		continuous  bool
		wantFailed  bool
		wantLogLine bool
	}{
		{"periodic checkpoint cut by a stop", func(n int, stop, _ func()) fault {
			if n == 1 {
				stop()
				return hangSilent // until the stop cuts it; the final one passes
			}
			return passThrough
		}, true, false, false},
		{"fence closed before the checkpoint", func(n int, _, fence func()) fault {
			fence()
			return fail500 // not reached: the fence keeps it back
		}, true, false, false},
		{"target refuses the checkpoint", func(int, func(), func()) fault { return fail403 }, false, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newFaultProxy(t, s)
			ps := p.endpointServer(s)
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			addDocs(t, s, src, 0, 10)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			runCtx, stopRun := context.WithCancel(ctx)
			defer stopRun()
			var closed atomic.Bool
			var writes int
			p.setFaults(func(_ int, r *http.Request, _ []byte) fault {
				if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/_local/") {
					return passThrough
				}
				writes++
				return tc.fault(writes, stopRun, func() { closed.Store(true) })
			})
			var logs bytes.Buffer
			var logMu sync.Mutex
			group := new(Group)
			rep := testRep(ps, src, tgt)
			rep.Continuous = tc.continuous
			Run(runCtx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef", Group: group,
				Logger: hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &logs, mu: &logMu}, Level: hclog.Warn}),
				Fence: func() error {
					if closed.Load() {
						return errors.New("job moved to another node")
					}
					return nil
				}})
			if got := group.Stats().CheckpointsFailure; (got > 0) != tc.wantFailed {
				t.Errorf("checkpoints_failure %d, want failed: %v", got, tc.wantFailed)
			}
			logMu.Lock()
			defer logMu.Unlock()
			if got := strings.Count(logs.String(), "checkpoints_failure_total"); got != map[bool]int{true: 1}[tc.wantLogLine] {
				t.Errorf("%d log lines of failed checkpoints, want %v:\n%s", got, tc.wantLogLine, logs.String())
			}
		})
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
