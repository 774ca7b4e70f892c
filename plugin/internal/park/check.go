package park

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// check queues a check of job id's source (dropped, to be retried at the
// next refresh, when too many wait).
func (w *Waker) check(id string) {
	select {
	case w.checks <- id:
	default:
		w.mu.Lock()
		if w.jobs[id] != nil {
			w.recheck[id] = true
		}
		w.mu.Unlock()
	}
}

// checkLoop runs queued checks until Stop.
func (w *Waker) checkLoop() {
	for {
		select {
		case <-w.ctx.Done():
			return
		case id := <-w.checks:
			w.checkNow(id)
		}
	}
}

// checkNow reads the source's changes after the parked seq: any change, or
// an answer saying the job cannot run as it is (the db is gone, access
// was refused), wakes the job; an unreachable source keeps it parked
// until the next check.
func (w *Waker) checkNow(id string) {
	w.mu.Lock()
	e := w.jobs[id]
	w.mu.Unlock()
	if e == nil {
		return
	}
	changed, err := w.changedSince(w.ctx, e)
	if w.ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	if err != nil && w.jobs[id] == e {
		w.recheck[id] = true
	} else {
		delete(w.recheck, id)
	}
	w.mu.Unlock()
	if err != nil {
		w.log.Debug("could not check a parked job's source; checking again later", "job", id, "source", e.ep.RedactedURL(), "error", err)
		return
	}
	if changed {
		w.wake(id)
	}
}

// changedSince reports whether e's source has changes after e.seq (or
// answers in a way only a run can handle).
func (w *Waker) changedSince(ctx context.Context, e *entry) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := w.opts.Pool.Endpoint(e.ep, e.rep)
	resp, err := c.Do(ctx, &couchclient.Request{Method: http.MethodGet, Path: "_changes", Buffer: true, NoRetry: true,
		Query: "since=" + url.QueryEscape(seqParam(e.seq)) + "&limit=1"})
	if err != nil {
		if errors.Is(err, couchclient.ErrNotAllowed) {
			return true, nil // a host the policy now forbids: the run says so
		}
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode/100 == 4, nil
	}
	var page struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return true, nil
	}
	return len(page.Results) > 0, nil
}

// seqParam is a seq as the since parameter takes it: a JSON string's
// contents, or the JSON text of a number or array.
func seqParam(seq json.RawMessage) string {
	var s string
	if json.Unmarshal(seq, &s) == nil {
		return s
	}
	if len(seq) == 0 {
		return "0"
	}
	return strings.TrimSpace(string(seq))
}
