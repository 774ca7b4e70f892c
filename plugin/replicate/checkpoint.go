package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

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
		return "", statusError("ensure_full_commit_failed", resp, "POST", c.RedactedURL()+"_ensure_full_commit")
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
		return "", checkpointFailure(side, reason)
	}
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
