package jobdata

import (
	"encoding/json"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// Stats are a job's replication counters as the record stores them. The
// field set matches the engine's replicate.Stats, so the job server
// converts between the two with a type conversion; the JSON names here are
// the stored format, owned by this package.
type Stats struct {
	RevisionsChecked      int64           `json:"revisions_checked"`
	MissingRevisionsFound int64           `json:"missing_revisions_found"`
	DocsRead              int64           `json:"docs_read"`
	DocsWritten           int64           `json:"docs_written"`
	DocWriteFailures      int64           `json:"doc_write_failures"`
	ChangesPending        *int64          `json:"changes_pending"`
	BulkGetDocs           int64           `json:"bulk_get_docs"`
	BulkGetAttempts       int64           `json:"bulk_get_attempts"`
	CheckpointedSourceSeq json.RawMessage `json:"checkpointed_source_seq"`
	SourceSeq             json.RawMessage `json:"source_seq"`
	ThroughSeq            json.RawMessage `json:"through_seq"`
	// LastProgress is when a batch last completed (unix s; couchepi's).
	LastProgress int64 `json:"last_progress,omitempty"`
	// LagSec is how long the replication has been behind its source:
	// the age of the oldest change it knows of and has not written, 0
	// when caught up, nil (null) while the source's position is unknown
	// (couchepi's).
	LagSec *int64 `json:"lag_sec"`
	// DocWriteFailuresByReason counts doc_write_failures by kind of
	// refusal (forbidden, too_large, …; couchepi's).
	DocWriteFailuresByReason map[string]int64 `json:"doc_write_failures_by_reason,omitempty"`
	// FailedDocs are the last documents the target refused, newest first
	// (at most replicate.MaxFailedDocs; couchepi's).
	FailedDocs []FailedDoc `json:"failed_docs,omitempty"`
	// Checkpoint is "target" while the job keeps its checkpoints on the
	// target alone (couchepi's, see replicate.Stats).
	Checkpoint string `json:"checkpoint,omitempty"`
}

// FailedDoc is one document revision a target refused (or the replicator
// skipped), as a job keeps it: the same unnamed struct type as
// replicate.FailedDoc, so that the two Stats convert into each other. It
// holds no document body.
type FailedDoc = struct {
	ID     string `json:"id"`
	Rev    string `json:"rev,omitempty"`
	Status int    `json:"status,omitempty"` // the refusal's HTTP status; 0 when unknown or skipped
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Time   int64  `json:"time"` // unix s
}

// RunningInfo is the `info` object of a pending or running job in
// `_scheduler/jobs` and `_scheduler/docs` (CouchDB 3.x keys and order).
func (s *Stats) RunningInfo() json.RawMessage {
	var o jsonobj.Builder
	s.addCommon(&o)
	o.Add("source_seq", s.SourceSeq).Add("through_seq", s.ThroughSeq)
	// couchepi's, after CouchDB's keys: when a batch last completed, and
	// how long the job has been behind its source.
	if s.LastProgress > 0 {
		o.Add("last_progress", ISOTime(s.LastProgress))
	}
	o.Add("lag_sec", s.LagSec)
	if s.Checkpoint != "" {
		o.Add("checkpoint", s.Checkpoint)
	}
	return o.Raw()
}

// CompletedInfo is the stats object of a completed replication: the `info`
// of `_scheduler/docs` when startTime is "", the `_replication_stats` CouchDB
// writes into the doc (with start_time) otherwise.
func (s *Stats) CompletedInfo(startTime string) json.RawMessage {
	var o jsonobj.Builder
	s.addCommon(&o)
	if startTime != "" {
		o.Add("start_time", startTime)
	}
	return o.Raw()
}

// addCommon adds the members both shapes start with.
func (s *Stats) addCommon(o *jsonobj.Builder) {
	o.Add("revisions_checked", s.RevisionsChecked).
		Add("missing_revisions_found", s.MissingRevisionsFound).
		Add("docs_read", s.DocsRead).
		Add("docs_written", s.DocsWritten).
		Add("changes_pending", s.ChangesPending).
		Add("doc_write_failures", s.DocWriteFailures).
		Add("bulk_get_docs", s.BulkGetDocs).
		Add("bulk_get_attempts", s.BulkGetAttempts).
		Add("checkpointed_source_seq", s.CheckpointedSourceSeq)
}

// ReplicationStats is the `_replication_stats` value written into the doc
// of a completed replication.
func (r *Record) ReplicationStats() json.RawMessage {
	return r.Stats.CompletedInfo(ISOTime(r.LastStartOrAdded()))
}
