package jobserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/plugin/jobserver/jobdata"
	"github.com/couchepi/couchepi/plugin/monitor"
)

// member is one top-level member of a JSON object, kept in document order.
type member struct {
	key string
	val json.RawMessage
}

// splitObject returns the members of a JSON object in order.
func splitObject(doc []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("document is not a JSON object")
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{t.(string), v})
	}
	return out, nil
}

// joinObject encodes members back into an object.
func joinObject(ms []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// DocState is the terminal state written into a replication doc.
type DocState struct {
	State  string          // "completed" or "failed"; "" removes every state field
	Reason string          // `_replication_state_reason` (failed)
	Stats  json.RawMessage // `_replication_stats` (completed)
}

// ApplyDocState returns doc with the replication state fields set as
// CouchDB writes them (§11): `_replication_state`, `_replication_state_time`
// (only when the state value changes), `_replication_state_reason` (failed)
// or `_replication_stats` (completed); changed=false when the body would
// stay the same.
func ApplyDocState(doc []byte, st DocState, now time.Time) (out []byte, changed bool, err error) {
	ms, err := splitObject(doc)
	if err != nil {
		return nil, false, err
	}
	get := func(k string) (json.RawMessage, int) {
		for i, m := range ms {
			if m.key == k {
				return m.val, i
			}
		}
		return nil, -1
	}
	set := func(k string, v json.RawMessage) {
		if old, i := get(k); i >= 0 {
			if !bytes.Equal(old, v) {
				ms[i].val, changed = v, true
			}
			return
		}
		ms, changed = append(ms, member{k, v}), true
	}
	del := func(k string) {
		if _, i := get(k); i >= 0 {
			ms, changed = append(ms[:i], ms[i+1:]...), true
		}
	}
	if st.State == "" {
		for _, k := range StateFields {
			del(k)
		}
		return joinObject(ms), changed, nil
	}
	state, _ := json.Marshal(st.State)
	if old, _ := get("_replication_state"); !bytes.Equal(old, state) {
		set("_replication_state", state)
		ts, _ := json.Marshal(jobdata.ISOTime(now.Unix()))
		set("_replication_state_time", ts)
	}
	switch st.State {
	case "completed":
		del("_replication_state_reason")
		set("_replication_stats", st.Stats)
	case "failed":
		reason, _ := json.Marshal(st.Reason)
		set("_replication_state_reason", reason)
		del("_replication_stats")
	}
	return joinObject(ms), changed, nil
}

// TerminalDocState is what a finished job writes into its doc: completed
// with its stats, or failed with its reason; ok is false for a job in any
// other state.
func TerminalDocState(rec *jobdata.Record) (st DocState, ok bool) {
	switch rec.State {
	case jobdata.Completed:
		return DocState{State: jobdata.Completed, Stats: monitor.ReplicationStats(rec)}, true
	case jobdata.Failed:
		reason := rec.LastError
		if reason == "" {
			reason = rec.ErrorReason()
		}
		return DocState{State: jobdata.Failed, Reason: reason}, true
	}
	return DocState{}, false
}

// StateFields are the fields the replicator writes into replication docs;
// CouchDB 3.x removes them all from a doc in a legacy state ("triggered"
// or "error") before running it.
var StateFields = []string{"_replication_state", "_replication_state_time", "_replication_state_reason", "_replication_id", "_replication_stats"}

// maxDocUpdateWait bounds the conflict retries of a state write (CouchDB: 12.8 s).
const maxDocUpdateWait = 12800 * time.Millisecond

// WriteDocState writes a terminal state into a replication doc through the
// host (as the system user), retrying conflicts with random backoff. A doc
// deleted meanwhile, or a write refused by validation, is logged and
// ignored, as CouchDB does.
func WriteDocState(ctx context.Context, svc hooks.Services, db, docID string, st DocState) error {
	wait := 50 * time.Millisecond
	deadline := time.Now().Add(maxDocUpdateWait)
	for {
		doc, err := svc.GetDoc(ctx, db, docID)
		var he *hooks.Error
		if errors.As(err, &he) && he.Status == 404 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s/%s: %w", db, docID, err)
		}
		out, changed, err := ApplyDocState(doc, st, time.Now())
		if err != nil || !changed {
			return err
		}
		_, err = svc.UpdateDoc(ctx, db, out)
		switch {
		case err == nil:
			return nil
		case errors.As(err, &he) && he.Status == 409 && time.Now().Before(deadline):
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait/2 + rand.N(wait/2+1)):
			}
			wait = min(wait*2, 3200*time.Millisecond)
		case errors.As(err, &he) && (he.Status == 403 || he.Status == 401 || he.Status == 404):
			return nil
		default:
			return fmt.Errorf("write state of %s/%s: %w", db, docID, err)
		}
	}
}
