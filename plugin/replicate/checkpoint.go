package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
)

// Where a run keeps its checkpoints.
//
// CouchDB writes each checkpoint to both endpoints and resumes from the
// newest session both docs share, so that a source deleted and recreated
// (which loses its doc) is replicated from the start. A user who may only
// read the source cannot write its doc: with `"checkpoint": "target"`
// (Rep.Checkpoint, PouchDB's option), or once the source refuses the
// write or its `_ensure_full_commit` with 401 or 403, the run keeps its
// checkpoints on the target alone, marked `"checkpoint": "target"` there.
// The next run resumes from the target's doc: with "target" from it
// alone; by default from it when it is so marked and the source has no
// doc of the replication or one the target's history holds (written
// before the source refused), else as CouchDB does. A default run tries
// the source again at its first checkpoint, so a user given write access
// gets checkpoints on both endpoints again.

// maxHistory is how many sessions a checkpoint doc remembers.
const maxHistory = 50

// HistoryEntry is one session in a checkpoint doc's history, CouchDB's fields in CouchDB's order.
type HistoryEntry struct {
	SessionID        string          `json:"session_id"`
	StartTime        string          `json:"start_time"`
	EndTime          string          `json:"end_time"`
	StartLastSeq     json.RawMessage `json:"start_last_seq"`
	EndLastSeq       json.RawMessage `json:"end_last_seq"`
	RecordedSeq      json.RawMessage `json:"recorded_seq"`
	MissingChecked   int64           `json:"missing_checked"`
	MissingFound     int64           `json:"missing_found"`
	DocsRead         int64           `json:"docs_read"`
	DocsWritten      int64           `json:"docs_written"`
	DocWriteFailures int64           `json:"doc_write_failures"`
	BulkGetDocs      int64           `json:"bulk_get_docs"`
	BulkGetAttempts  int64           `json:"bulk_get_attempts"`
}

// Checkpoint is the body of a `_local/<base id>` checkpoint doc (without
// _id/_rev), its members in CouchDB's order.
type Checkpoint struct {
	SessionID            string          `json:"session_id"`
	SourceLastSeq        json.RawMessage `json:"source_last_seq"`
	ReplicationIDVersion int             `json:"replication_id_version"`
	// Checkpoint is "target" in a doc written on the target alone
	// (couchepi's; CouchDB reads the doc without it).
	Checkpoint string `json:"checkpoint,omitempty"`
	// Legacy top-level fields written for doc_ids replications.
	StartTime        string            `json:"start_time,omitempty"`
	EndTime          string            `json:"end_time,omitempty"`
	DocsRead         *int64            `json:"docs_read,omitempty"`
	DocsWritten      *int64            `json:"docs_written,omitempty"`
	DocWriteFailures *int64            `json:"doc_write_failures,omitempty"`
	History          []json.RawMessage `json:"history"`
}

// localDoc is a checkpoint doc as read from one endpoint.
type localDoc struct {
	Rev  string
	Body *Checkpoint
}

// readCheckpoint GETs `_local/<id>`; a missing doc is (nil, nil).
func readCheckpoint(ctx context.Context, c *couchclient.Client, id string) (*localDoc, error) {
	resp, err := c.Do(ctx, &couchclient.Request{Buffer: true, Method: http.MethodGet, Path: "_local/" + id})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		io.Copy(io.Discard, resp.Body)
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError("checkpoint_read_failed", resp, "GET", c.RedactedURL()+"_local/"+id)
	}
	var raw struct {
		Rev string `json:"_rev"`
		Checkpoint
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, newError("checkpoint_read_failed", fmt.Sprintf("invalid checkpoint doc at %s_local/%s: %v", c.RedactedURL(), id, err), false)
	}
	cp := raw.Checkpoint
	return &localDoc{Rev: raw.Rev, Body: &cp}, nil
}

// startPoint is what the checkpoints say about where to start.
type startPoint struct {
	seq     json.RawMessage   // nil = no common ancestry
	history []json.RawMessage // history to extend
	newest  *HistoryEntry     // newest history entry used for carried-over stats
}

// compareCheckpoints finds the start seq from the source and target
// checkpoint docs: same top-level session → the source's source_last_seq;
// otherwise walk both histories newest first for a shared session.
func compareCheckpoints(src, tgt *Checkpoint) startPoint {
	if src == nil || tgt == nil {
		return startPoint{}
	}
	if src.SessionID != "" && src.SessionID == tgt.SessionID {
		sp := startPoint{seq: src.SourceLastSeq, history: src.History}
		sp.newest = firstEntry(src.History)
		return sp
	}
	sh, th := decodeHistory(src.History), decodeHistory(tgt.History)
	for len(sh) > 0 && len(th) > 0 {
		if e := findSession(sh[0].SessionID, th); e != nil {
			return startPoint{seq: e.RecordedSeq, history: src.History, newest: firstEntry(src.History)}
		}
		if e := findSession(th[0].SessionID, sh[1:]); e != nil {
			return startPoint{seq: e.RecordedSeq, history: src.History, newest: firstEntry(src.History)}
		}
		sh, th = sh[1:], th[1:]
	}
	return startPoint{}
}

// onTargetAlone reports whether the run keeps its checkpoints on the
// target alone: asked to, or since the source refused one.
func (r *run) onTargetAlone() bool {
	return r.rep.Checkpoint == parse.CheckpointTarget || r.sourceRefused.Load()
}

// startingPoint is where the run starts from the checkpoint docs read at
// its start (src is nil with "checkpoint": "target", where it is not read).
func (r *run) startingPoint(src, tgt *Checkpoint) startPoint {
	fromTarget := r.rep.Checkpoint == parse.CheckpointTarget ||
		tgt != nil && tgt.Checkpoint == parse.CheckpointTarget && (src == nil || holdsSession(tgt, src.SessionID))
	if !fromTarget {
		return compareCheckpoints(src, tgt)
	}
	if tgt == nil {
		return startPoint{}
	}
	r.existing = tgt
	return startPoint{seq: tgt.SourceLastSeq, history: tgt.History, newest: firstEntry(tgt.History)}
}

// holdsSession reports whether cp was written by session id or descends
// from a doc it wrote.
func holdsSession(cp *Checkpoint, id string) bool {
	return id != "" && (cp.SessionID == id || findSession(id, decodeHistory(cp.History)) != nil)
}

// keepOnTarget makes the run keep its checkpoints on the target alone
// from now on, because the source refused one (why).
func (r *run) keepOnTarget(why string) {
	if r.sourceRefused.Swap(true) {
		return
	}
	r.log.Warn("the source refuses checkpoints: keeping them on the target alone", "reason", why)
}

// sourceCommit is the source's `_ensure_full_commit` before a checkpoint:
// its instance_start_time, "" when the checkpoint is kept on the target
// alone (then nothing is asked of the source).
func (r *run) sourceCommit(ctx context.Context) (string, error) {
	if r.onTargetAlone() {
		return "", nil
	}
	ist, err := ensureFullCommit(ctx, r.src)
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		r.keepOnTarget(ref.Error())
		return "", nil
	case err != nil:
		return "", checkpointFailure("source", asError(err).Reason)
	}
	return ist, nil
}

// writeCheckpoints writes the checkpoint of through on the source, unless
// it is kept on the target alone, then on the target, and returns the
// body written there.
func (r *run) writeCheckpoints(ctx context.Context, through json.RawMessage, stats Stats) ([]byte, error) {
	body := r.checkpointBody(through, stats)
	if !r.onTargetAlone() {
		rev, err := writeCheckpoint(ctx, r.src, "source", r.repID.Base, r.srcRev, body)
		var ref *refusal
		switch {
		case errors.As(err, &ref):
			r.keepOnTarget(ref.Error())
			body = r.checkpointBody(through, stats) // marked for the target alone
		case err != nil:
			return nil, err
		default:
			r.srcRev = rev
		}
	}
	rev, err := writeCheckpoint(ctx, r.tgt, "target", r.repID.Base, r.tgtRev, body)
	if err != nil {
		return nil, err
	}
	r.tgtRev = rev
	return body, nil
}

// refusal is an endpoint refusing a checkpoint request with 401 or 403.
type refusal struct{ err *Error }

func (e *refusal) Error() string { return e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// refused wraps err as a refusal when status is 401 or 403.
func refused(status int, err *Error) error {
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return &refusal{err: err}
	}
	return err
}

func firstEntry(h []json.RawMessage) *HistoryEntry {
	hs := decodeHistory(h)
	if len(hs) == 0 {
		return nil
	}
	return &hs[0]
}

func decodeHistory(h []json.RawMessage) []HistoryEntry {
	out := make([]HistoryEntry, 0, len(h))
	for _, raw := range h {
		var e HistoryEntry
		if json.Unmarshal(raw, &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

func findSession(id string, h []HistoryEntry) *HistoryEntry {
	if id == "" {
		return nil
	}
	for i := range h {
		if h[i].SessionID == id {
			return &h[i]
		}
	}
	return nil
}

// ensureFullCommit POSTs `_ensure_full_commit` and returns instance_start_time.
func ensureFullCommit(ctx context.Context, c *couchclient.Client) (string, error) {
	resp, err := c.Do(ctx, &couchclient.Request{Buffer: true,
		Method: http.MethodPost, Path: "_ensure_full_commit",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte{},
	})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", refused(resp.StatusCode, statusError("ensure_full_commit_failed", resp, "POST", c.RedactedURL()+"_ensure_full_commit"))
	}
	var v struct {
		InstanceStartTime json.RawMessage `json:"instance_start_time"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	return seqString(v.InstanceStartTime), nil
}

// writeCheckpoint PUTs body as `_local/<id>` with the last known rev; on a
// conflict it re-reads the doc and accepts it when it already holds body.
// A conflict with a doc of our own session (an earlier write whose answer was
// lost) is overwritten once. It returns the new rev.
func writeCheckpoint(ctx context.Context, c *couchclient.Client, side, id, rev string, body []byte) (string, error) {
	return putCheckpoint(ctx, c, side, id, rev, body, true)
}

func putCheckpoint(ctx context.Context, c *couchclient.Client, side, id, rev string, body []byte, retry bool) (string, error) {
	doc := body
	if rev != "" {
		doc = append([]byte(`{"_rev":`+quote(rev)+`,`), body[1:]...)
	}
	resp, err := c.Do(ctx, &couchclient.Request{Buffer: true,
		Method: http.MethodPut, Path: "_local/" + id,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: doc,
	})
	if err != nil {
		return "", checkpointFailure(side, err.Error())
	}
	defer resp.Body.Close()
	var v struct {
		Rev    string `json:"rev"`
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	switch {
	case resp.StatusCode/100 == 2:
		return v.Rev, nil
	case resp.StatusCode == http.StatusConflict:
		cur, err := readCheckpoint(ctx, c, id)
		if err == nil && cur != nil {
			got, _ := json.Marshal(cur.Body)
			want := Checkpoint{}
			if json.Unmarshal(body, &want) == nil {
				wantJSON, _ := json.Marshal(&want)
				if bytes.Equal(got, wantJSON) {
					return cur.Rev, nil
				}
				if retry && cur.Body.SessionID == want.SessionID && want.SessionID != "" {
					// Our own earlier write whose answer was lost: write over it.
					return putCheckpoint(ctx, c, side, id, cur.Rev, body, false)
				}
			}
		}
		return "", checkpointFailure(side, "conflict")
	default:
		reason := v.Error
		if v.Reason != "" {
			reason += ": " + v.Reason
		}
		if reason == "" {
			reason = http.StatusText(resp.StatusCode)
		}
		return "", refused(resp.StatusCode, checkpointFailure(side, reason))
	}
}

// checkpointFailed reports whether err, what a checkpoint under ctx
// ended with, is a failure to count in checkpoints_failure and log. A
// checkpoint is not failed when the run's own stop cut it short (ctx
// ended: a stop, a park, a rotation), when the job left this node (its
// fence says no: the next runner checkpoints), or when it was left out
// (ErrSkipCheckpoint).
func (r *run) checkpointFailed(ctx context.Context, err error) bool {
	switch {
	case err == nil, ctx.Err() != nil, errors.Is(err, context.Canceled), errors.Is(err, ErrSkipCheckpoint), r.fenced(err):
		return false
	}
	return true
}

// logCheckpointFailure logs a failed checkpoint of through, at most once
// a minute per run (callers hold cpMu).
func (r *run) logCheckpointFailure(through json.RawMessage, err error) {
	if logIt, _, _ := r.cpLines.Fail(time.Now()); !logIt {
		r.cpQuiet++
		return
	}
	r.log.Warn("checkpoint failed; counted in checkpoints_failure_total (logged at most once a minute)",
		"seq", string(through), "error", redactAll(err.Error()), "not_logged", r.cpQuiet)
	r.cpQuiet = 0
}

func checkpointFailure(side, reason string) *Error {
	return newError("checkpoint_commit_failure", "Error updating the "+side+" checkpoint document: "+reason, false)
}

// seqString renders a seq as the `since` query value: strings as-is, other JSON as text.
func seqString(seq json.RawMessage) string {
	s := strings.TrimSpace(string(seq))
	if strings.HasPrefix(s, `"`) {
		var out string
		if json.Unmarshal(seq, &out) == nil {
			return out
		}
	}
	return s
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
