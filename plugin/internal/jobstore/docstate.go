package jobstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

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
	ms, err := jsonobj.Parse(doc)
	if err != nil {
		return nil, false, err
	}
	set := func(k string, v json.RawMessage) {
		if old, ok := ms.Get(k); !ok || !bytes.Equal(old, v) {
			ms, changed = ms.Set(k, v), true
		}
	}
	del := func(k string) {
		if _, ok := ms.Get(k); ok {
			ms, changed = ms.Delete(k), true
		}
	}
	if st.State == "" {
		for _, k := range stateFields() {
			del(k)
		}
		return ms.Bytes(), changed, nil
	}
	state := jsonobj.AppendString(nil, st.State)
	if old, _ := ms.Get("_replication_state"); !bytes.Equal(old, state) {
		set("_replication_state", state)
		set("_replication_state_time", jsonobj.AppendString(nil, jobdata.ISOTime(now.Unix())))
	}
	switch st.State {
	case "completed":
		del("_replication_state_reason")
		set("_replication_stats", st.Stats)
	case "failed":
		set("_replication_state_reason", jsonobj.AppendString(nil, st.Reason))
		del("_replication_stats")
	}
	return ms.Bytes(), changed, nil
}

// TerminalDocState is what a finished job writes into its doc: completed
// with its stats, or failed with its reason; ok is false for a job in any
// other state.
func TerminalDocState(rec *jobdata.Record) (st DocState, ok bool) {
	switch rec.State {
	case jobdata.Completed:
		return DocState{State: jobdata.Completed, Stats: rec.ReplicationStats()}, true
	case jobdata.Failed:
		reason := rec.LastError
		if reason == "" {
			reason = rec.ErrorReason()
		}
		return DocState{State: jobdata.Failed, Reason: reason}, true
	}
	return DocState{}, false
}

// stateFields returns the fields the replicator writes into replication
// docs; CouchDB 3.x removes them all from a doc in a legacy state
// ("triggered" or "error") before running it.
func stateFields() []string {
	return []string{"_replication_state", "_replication_state_time", "_replication_state_reason", "_replication_id", "_replication_stats"}
}

// MaxDocUpdateWait bounds the conflict retries of a state write (CouchDB: 12.8 s).
const MaxDocUpdateWait = 12800 * time.Millisecond

// WriteDocState writes a terminal state into a replication doc through the
// host (as the system user), retrying conflicts with random backoff. A doc
// deleted meanwhile, or a write refused by validation, is logged and
// ignored, as CouchDB does.
func WriteDocState(ctx context.Context, svc hooks.Services, db, docID string, st DocState) error {
	wait := 50 * time.Millisecond
	deadline := time.Now().Add(MaxDocUpdateWait)
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
