// Package monitor renders the replicator's monitoring endpoints
// (`_scheduler/jobs`, `_scheduler/docs`, the replication entries of
// `_active_tasks`) from the job data records, in CouchDB's JSON shapes,
// with endpoint credentials redacted.
package monitor

import (
	"bytes"
	"encoding/json"

	"github.com/couchepi/couchepi/plugin/jobserver/jobdata"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// obj builds a JSON object with keys in insertion order (CouchDB's order
// matters to clients comparing output byte for byte).
type obj struct{ buf bytes.Buffer }

// add appends one member; v is marshalled with encoding/json.
func (o *obj) add(key string, v any) *obj {
	if o.buf.Len() == 0 {
		o.buf.WriteByte('{')
	} else {
		o.buf.WriteByte(',')
	}
	o.buf.Write(marshal(key))
	o.buf.WriteByte(':')
	o.buf.Write(marshal(v))
	return o
}

// marshal encodes v as compact JSON without HTML escaping (CouchDB writes
// `<0.1.0>` as is); a value that cannot be encoded becomes null.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte("null")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// raw returns the finished object.
func (o *obj) raw() json.RawMessage {
	if o.buf.Len() == 0 {
		return json.RawMessage("{}")
	}
	out := append([]byte(nil), o.buf.Bytes()...)
	return append(out, '}')
}

// nullable returns nil (JSON null) for "".
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// seq returns a stats seq value, JSON null when unset.
func seq(v json.RawMessage) any {
	if len(v) == 0 {
		return nil
	}
	return v
}

// pending returns changes_pending, JSON null when unknown.
func pending(v *int64) any {
	if v == nil {
		return nil
	}
	return *v
}

// runningInfo is the `info` of a pending/running job: CouchDB 3.x's stats keys.
func runningInfo(s replicate.Stats) json.RawMessage {
	var o obj
	o.add("revisions_checked", s.RevisionsChecked).
		add("missing_revisions_found", s.MissingRevisionsFound).
		add("docs_read", s.DocsRead).
		add("docs_written", s.DocsWritten).
		add("changes_pending", pending(s.ChangesPending)).
		add("doc_write_failures", s.DocWriteFailures).
		add("bulk_get_docs", s.BulkGetDocs).
		add("bulk_get_attempts", s.BulkGetAttempts).
		add("checkpointed_source_seq", seq(s.CheckpointedSourceSeq)).
		add("source_seq", seq(s.SourceSeq)).
		add("through_seq", seq(s.ThroughSeq))
	return o.raw()
}

// completedStats is the stats object of a completed replication as
// `_scheduler/docs` shows it (without start_time) or as `_replication_stats`
// stores it (with start_time, when startTime != "").
func completedStats(s replicate.Stats, startTime string) json.RawMessage {
	var o obj
	o.add("revisions_checked", s.RevisionsChecked).
		add("missing_revisions_found", s.MissingRevisionsFound).
		add("docs_read", s.DocsRead).
		add("docs_written", s.DocsWritten).
		add("changes_pending", pending(s.ChangesPending)).
		add("doc_write_failures", s.DocWriteFailures).
		add("bulk_get_docs", s.BulkGetDocs).
		add("bulk_get_attempts", s.BulkGetAttempts).
		add("checkpointed_source_seq", seq(s.CheckpointedSourceSeq))
	if startTime != "" {
		o.add("start_time", startTime)
	}
	return o.raw()
}

// ReplicationStats is the `_replication_stats` value written into a
// completed replication doc.
func ReplicationStats(rec *jobdata.Record) json.RawMessage {
	return completedStats(rec.Stats, jobdata.ISOTime(rec.LastStartOrAdded()))
}

// errorInfo is `{"error": reason}`.
func errorInfo(reason string) json.RawMessage {
	var o obj
	return o.add("error", reason).raw()
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

// jobJSON renders one `_scheduler/jobs` entry (CouchDB 3.x shape).
func jobJSON(rec *jobdata.Record) json.RawMessage {
	src, tgt, _, _ := endpoints(rec)
	var info any
	switch {
	case rec.State == jobdata.Running:
		info = runningInfo(rec.Stats)
	case rec.State == jobdata.Pending && rec.LastStart != 0:
		info = runningInfo(rec.Stats)
	}
	history := make([]json.RawMessage, len(rec.History))
	for i, e := range rec.History {
		var o obj
		o.add("timestamp", jobdata.ISOTime(e.Timestamp)).add("type", e.Type)
		if e.Reason != "" {
			o.add("reason", e.Reason)
		}
		history[i] = o.raw()
	}
	var pid any
	if rec.State == jobdata.Running {
		pid = nullable(rec.PID)
	}
	var o obj
	o.add("database", nullable(rec.DBName)).
		add("id", nullable(rec.RepID)).
		add("pid", pid).
		add("source", src).
		add("target", tgt).
		add("user", nullable(user(rec))).
		add("doc_id", nullable(rec.DocID)).
		add("info", info).
		add("history", history).
		add("node", nullable(rec.Node)).
		add("start_time", jobdata.ISOTime(rec.StartTime))
	return o.raw()
}

// docJSON renders one `_scheduler/docs` entry (CouchDB 3.x shapes: the
// terminal states have their own, shorter form).
func docJSON(rec *jobdata.Record) json.RawMessage {
	src, tgt, srcProxy, tgtProxy := endpoints(rec)
	var o obj
	o.add("database", rec.DBName).add("doc_id", rec.DocID)
	switch rec.State {
	case jobdata.Completed, jobdata.Failed:
		var info json.RawMessage
		start := rec.StartTime
		if rec.State == jobdata.Completed {
			info = completedStats(rec.Stats, "")
			start = rec.LastStartOrAdded()
		} else {
			info = errorInfo(rec.ErrorReason())
		}
		o.add("id", nil).
			add("source", src).
			add("target", tgt).
			add("state", rec.State).
			add("error_count", rec.ErrorCount).
			add("info", info).
			add("start_time", jobdata.ISOTime(start)).
			add("last_updated", jobdata.ISOTime(rec.LastUpdated))
		return o.raw()
	}
	var info any
	switch {
	case rec.State == jobdata.Crashing:
		info = errorInfo(rec.LastError)
	case rec.State == jobdata.Running, rec.LastStart != 0:
		info = runningInfo(rec.Stats)
	}
	o.add("id", nullable(rec.RepID)).
		add("node", nullable(rec.Node)).
		add("source", src).
		add("target", tgt).
		add("state", rec.State).
		add("info", info).
		add("error_count", rec.ErrorCount).
		add("last_updated", jobdata.ISOTime(rec.LastUpdated)).
		add("start_time", jobdata.ISOTime(rec.StartTime)).
		add("source_proxy", nullable(srcProxy)).
		add("target_proxy", nullable(tgtProxy))
	return o.raw()
}

// activeTask renders the `_active_tasks` entry of a running job (CouchDB
// 3.x shape and key order), or nil when the job is not running.
func activeTask(rec *jobdata.Record) json.RawMessage {
	if rec.State != jobdata.Running || rec.Rep == nil {
		return nil
	}
	src, tgt, _, _ := endpoints(rec)
	s := rec.Stats
	updated := max(rec.StatsUpdated, rec.LastStart)
	var o obj
	o.add("node", nullable(rec.Node)).
		add("pid", nullable(rec.PID)).
		add("process_status", "waiting").
		add("bulk_get_attempts", s.BulkGetAttempts).
		add("bulk_get_docs", s.BulkGetDocs).
		add("changes_pending", pending(s.ChangesPending)).
		add("checkpoint_interval", rec.Rep.CheckpointInterval).
		add("checkpointed_source_seq", seq(s.CheckpointedSourceSeq)).
		add("continuous", rec.Rep.Continuous).
		add("database", nullable(rec.DBName)).
		add("doc_id", nullable(rec.DocID)).
		add("doc_write_failures", s.DocWriteFailures).
		add("docs_read", s.DocsRead).
		add("docs_written", s.DocsWritten).
		add("missing_revisions_found", s.MissingRevisionsFound).
		add("replication_id", nullable(rec.RepID)).
		add("revisions_checked", s.RevisionsChecked).
		add("source", src).
		add("source_seq", seq(s.SourceSeq)).
		add("started_on", rec.LastStart).
		add("target", tgt).
		add("through_seq", seq(s.ThroughSeq)).
		add("type", "replication").
		add("updated_on", updated).
		add("user", nullable(user(rec)))
	return o.raw()
}
