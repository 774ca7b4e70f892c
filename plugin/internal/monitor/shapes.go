// Package monitor renders the replicator's monitoring endpoints
// (`_scheduler/jobs`, `_scheduler/docs`, the replication entries of
// `_active_tasks`) from the job data records, in CouchDB's JSON shapes,
// with endpoint credentials redacted.
package monitor

import (
	"encoding/json"
	"fmt"
	"hash/crc32"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// nullable returns nil (JSON null) for "".
// isNull reports whether a raw JSON value is absent or null.
func isNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// errorInfo is `{"error": reason}`.
func errorInfo(reason string) json.RawMessage {
	var o jsonobj.Builder
	return o.Add("error", reason).Raw()
}

// endpoints returns the redacted source and target URLs and proxies.
func endpoints(rec *jobdata.Record) (src, tgt, srcProxy, tgtProxy string) {
	if rec.Rep == nil {
		return "", "", "", ""
	}
	return rec.Rep.Source.RedactedURL(), rec.Rep.Target.RedactedURL(),
		rec.Rep.Source.RedactedProxy(), rec.Rep.Target.RedactedProxy()
}

// user is the name of who started the replication, or "".
func user(rec *jobdata.Record) string {
	if rec.Rep == nil {
		return ""
	}
	return rec.Rep.UserCtx.Name
}

// jobJSON renders one `_scheduler/jobs` entry (CouchDB 3.x shape), with
// couchepi's doc_write_failures_by_reason after CouchDB's keys.
func jobJSON(rec *jobdata.Record) json.RawMessage {
	return addFailureCounts(jobObject(rec), rec).Raw()
}

// jobDetailJSON renders `_scheduler/jobs/{id}`: the entry and the job's
// last refused documents (failed_docs).
func jobDetailJSON(rec *jobdata.Record) json.RawMessage {
	o := addFailureCounts(jobObject(rec), rec)
	return addFailedDocs(o, rec).Raw()
}

// jobObject builds the CouchDB 3.x members of a `_scheduler/jobs` entry.
func jobObject(rec *jobdata.Record) *jsonobj.Builder {
	src, tgt, _, _ := endpoints(rec)
	var info any
	state := rec.ShownState()
	switch {
	case state == jobdata.Running, state == jobdata.Pending && rec.LastStart != 0:
		info = rec.RunningInfo()
	}
	history := make([]json.RawMessage, len(rec.History))
	for i, e := range rec.History {
		var o jsonobj.Builder
		o.Add("timestamp", jobdata.ISOTime(e.Timestamp)).Add("type", e.Type)
		if e.Reason != "" {
			o.Add("reason", e.Reason)
		}
		history[i] = o.Raw()
	}
	var pid any
	if rec.State == jobdata.Running {
		pid = nullable(rec.PID)
	}
	var o jsonobj.Builder
	o.Add("database", nullable(rec.DBName)).
		Add("id", nullable(rec.RepID)).
		Add("pid", pid).
		Add("source", src).
		Add("target", tgt).
		Add("user", nullable(user(rec))).
		Add("doc_id", nullable(rec.DocID)).
		Add("info", info).
		Add("history", history).
		Add("node", nullable(rec.Node)).
		Add("start_time", jobdata.ISOTime(rec.StartTime))
	return &o
}

// docJSON renders one `_scheduler/docs` entry, with couchepi's
// doc_write_failures_by_reason after CouchDB's keys.
func docJSON(rec *jobdata.Record) json.RawMessage {
	return addFailureCounts(docObject(rec), rec).Raw()
}

// docDetailJSON renders `_scheduler/docs/{db}/{docid}`: the entry and the
// job's last refused documents (failed_docs).
func docDetailJSON(rec *jobdata.Record) json.RawMessage {
	o := addFailureCounts(docObject(rec), rec)
	return addFailedDocs(o, rec).Raw()
}

// docObject builds the CouchDB 3.x members of a `_scheduler/docs` entry
// (the terminal states have their own, shorter form, which CouchDB reads
// from the doc's state fields: a failed doc has error_count 1 and starts
// when it failed, `_replication_state_time`).
func docObject(rec *jobdata.Record) *jsonobj.Builder {
	src, tgt, srcProxy, tgtProxy := endpoints(rec)
	var o jsonobj.Builder
	o.Add("database", rec.DBName).Add("doc_id", rec.DocID)
	state := rec.ShownState()
	switch state {
	case jobdata.Completed, jobdata.Failed:
		var info json.RawMessage
		var start int64
		var errorCount int
		if rec.State == jobdata.Completed {
			info = rec.Stats.CompletedInfo("")
			start = rec.LastStartOrAdded()
		} else {
			info = errorInfo(rec.ErrorReason())
			start, errorCount = rec.LastUpdated, 1
		}
		o.Add("id", nil).
			Add("source", src).
			Add("target", tgt).
			Add("state", rec.State).
			Add("error_count", errorCount).
			Add("info", info).
			Add("start_time", jobdata.ISOTime(start)).
			Add("last_updated", jobdata.ISOTime(rec.LastUpdated))
		return &o
	}
	var info any
	switch {
	case rec.State == jobdata.Crashing:
		info = errorInfo(rec.LastError)
	case state == jobdata.Running, rec.LastStart != 0:
		info = rec.RunningInfo()
	}
	o.Add("id", nullable(rec.RepID)).
		Add("node", nullable(rec.Node)).
		Add("source", src).
		Add("target", tgt).
		Add("state", state).
		Add("info", info).
		Add("error_count", rec.ErrorCount).
		Add("last_updated", jobdata.ISOTime(rec.LastUpdated)).
		Add("start_time", jobdata.ISOTime(rec.StartTime)).
		Add("source_proxy", nullable(srcProxy)).
		Add("target_proxy", nullable(tgtProxy))
	return &o
}

// addFailureCounts adds couchepi's doc_write_failures_by_reason, the
// job's refused documents counted by kind (forbidden, too_large, …), when
// it has any: a few members, so the listings carry it too.
func addFailureCounts(o *jsonobj.Builder, rec *jobdata.Record) *jsonobj.Builder {
	if len(rec.Stats.DocWriteFailuresByReason) > 0 {
		o.Add("doc_write_failures_by_reason", rec.Stats.DocWriteFailuresByReason) // keys sorted
	}
	return o
}

// addFailedDocs adds couchepi's failed_docs, the job's last refused
// documents, newest first, when it has any. Only the one-entry endpoints
// carry it: up to replicate.MaxFailedDocs entries of a few hundred bytes
// each would multiply the size of a listing of thousands of jobs.
func addFailedDocs(o *jsonobj.Builder, rec *jobdata.Record) *jsonobj.Builder {
	docs := rec.Stats.FailedDocs
	if len(docs) == 0 {
		return o
	}
	list := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		var e jsonobj.Builder
		var status any
		if d.Status != 0 {
			status = d.Status
		}
		list[i] = e.Add("id", d.ID).
			Add("rev", nullable(d.Rev)).
			Add("status", status).
			Add("error", d.Error).
			Add("reason", d.Reason).
			Add("time", jobdata.ISOTime(d.Time)).
			Raw()
	}
	return o.Add("failed_docs", list)
}

// taskPID is the pid of a job's `_active_tasks` entry: its worker's, or,
// for a job that has none (parked), a stable one of the same shape made
// from its replication id. It is never null: CouchDB's entries always
// have one, and Fauxton's Active Tasks page fails on a null pid.
func taskPID(rec *jobdata.Record) string {
	if rec.PID != "" {
		return rec.PID
	}
	return fmt.Sprintf("<0.%d.1>", crc32.ChecksumIEEE([]byte(rec.RepID+"|"+rec.DBName+"|"+rec.DocID))%1000000)
}

// activeTask renders the `_active_tasks` entry of a running job (CouchDB
// 3.x shape and key order), parked ones included, or nil when the job is
// not running.
func activeTask(rec *jobdata.Record) json.RawMessage {
	if rec.ShownState() != jobdata.Running || rec.Rep == nil {
		return nil
	}
	src, tgt, _, _ := endpoints(rec)
	s := rec.Stats
	updated := max(rec.StatsUpdated, rec.LastStart)
	var o jsonobj.Builder
	o.Add("node", nullable(rec.Node)).
		Add("pid", taskPID(rec)).
		Add("process_status", "waiting").
		Add("bulk_get_attempts", s.BulkGetAttempts).
		Add("bulk_get_docs", s.BulkGetDocs).
		Add("changes_pending", s.ChangesPending)
	if s.Checkpoint != "" { // couchepi's: kept on the target alone
		o.Add("checkpoint", s.Checkpoint)
	}
	o.Add("checkpoint_interval", rec.Rep.CheckpointInterval).
		Add("checkpointed_source_seq", s.CheckpointedSourceSeq).
		Add("continuous", rec.Rep.Continuous).
		Add("database", nullable(rec.DBName)).
		Add("doc_id", nullable(rec.DocID)).
		Add("doc_write_failures", s.DocWriteFailures)
	if len(s.DocWriteFailuresByReason) > 0 { // couchepi's, in key order as CouchDB's
		o.Add("doc_write_failures_by_reason", s.DocWriteFailuresByReason)
	}
	o.Add("docs_read", s.DocsRead).
		Add("docs_written", s.DocsWritten).
		Add("lag_sec", s.LagSec). // couchepi's (see jobdata.Stats)
		Add("missing_revisions_found", s.MissingRevisionsFound).
		Add("replication_id", nullable(rec.RepID)).
		Add("revisions_checked", s.RevisionsChecked).
		Add("source", src).
		Add("source_seq", s.SourceSeq).
		Add("started_on", rec.LastStart).
		Add("target", tgt)
	if !isNull(s.ThroughSeq) { // as CouchDB: none before the first batch
		o.Add("through_seq", s.ThroughSeq)
	}
	o.Add("type", "replication").
		Add("updated_on", updated).
		Add("user", nullable(user(rec)))
	if rec.Parked != nil { // couchepi's: waiting for its source to change
		o.Add("parked_since", jobdata.ISOTime(rec.Parked.Since))
	}
	return o.Raw()
}
