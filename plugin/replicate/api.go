// Package replicate runs one replication with the CouchDB replication
// protocol: open both endpoints, find the start sequence from the
// checkpoints, read the source's changes, and have worker_processes workers
// diff, fetch and write each batch, checkpointing the through_seq.
//
// It is public so that a program can run replications in its own process
// without the plugin, as cmd/couchrep does; the plugin's job records,
// scheduler and monitoring stay in plugin/internal.
package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/hashicorp/go-hclog"
)

// Stats are a replication's counters, with CouchDB's JSON names.
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
	// when caught up, nil (null) while it does not know the source's
	// position (couchepi's).
	LagSec *int64 `json:"lag_sec"`
	// DocWriteFailuresByReason counts doc_write_failures by kind of
	// refusal (WriteFailureReasons), as far as this engine saw them: a
	// count carried over from a checkpoint another replicator wrote is in
	// DocWriteFailures only (couchepi's).
	DocWriteFailuresByReason map[string]int64 `json:"doc_write_failures_by_reason,omitempty"`
	// FailedDocs are the last MaxFailedDocs documents refused, newest
	// first (couchepi's).
	FailedDocs []FailedDoc `json:"failed_docs,omitempty"`
	// Checkpoint is "target" while the run keeps its checkpoints on the
	// target alone (asked to, or the source refused them), else ""
	// (couchepi's).
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Options are how a replication is run (the Rep says what to replicate).
type Options struct {
	// Logger receives structured, credential-free logs (nil = discard).
	Logger hclog.Logger
	// Pool is the shared HTTP pool (nil = a private pool closed when Run returns).
	Pool *couchclient.Pool
	// Group is the group of runs this one shares reads of common sources
	// with and adds its counters to (nil = a group of its own).
	Group *Group
	// ServerUUID is the local server's uuid, an input of the replication id.
	ServerUUID string
	// RepID is a precomputed replication id (nil = computed, fetching filter code).
	RepID *parse.RepID
	// StartStats are stats carried over from earlier runs; the start stats are
	// the per-field max of these and the checkpoint history's newest entry.
	StartStats Stats
	// OnStats is called when stats change (at most once a second) and at each
	// checkpoint, from more than one goroutine: it must be safe for concurrent use.
	OnStats func(Stats)
	// OnCheckpoint is called after each successful checkpoint.
	OnCheckpoint func(Stats)
	// OnStart, when set, is called once the run knows where it starts,
	// with the stats it carries over from earlier runs (StartStats and the
	// checkpoint's history): what the run's own work is counted from.
	OnStart func(carried Stats)
	// Live, when set, is called once the run knows where it starts with a
	// function returning the run's stats as they are at the moment of the
	// call (its counters move with every batch); safe to call from any
	// goroutine, also after Run returns. A runner answers monitoring
	// requests with it, fresh, without writing anything per batch.
	Live func(stats func() Stats)
	// MaxDocumentIDLength is `[replicator] max_document_id_length` in bytes:
	// changes of docs with longer ids are skipped and counted as
	// doc_write_failures (0 = no limit, CouchDB's default).
	MaxDocumentIDLength int
	// IdleAfter, when positive, ends a continuous run that has caught up
	// and received no change for this long: it writes its final
	// checkpoint and returns ErrIdle, so the job can be parked until its
	// source changes. 0 runs until ctx is cancelled.
	IdleAfter time.Duration
	// OnIdle, when set, is called with true once a continuous run has
	// caught up and received nothing for a second (or IdleAfter, if
	// shorter), and with false when a change arrives after that.
	OnIdle func(idle bool)
	// Slot, when set, lets a continuous run share the job server's slots
	// (max_jobs): it holds one while it replicates. When asked for it
	// (another job waits), it reads the source in rounds: it reads what is
	// there, replicates it, hands its slot on and reads nothing until the
	// source changes, then waits for a slot again. nil: the run reads its
	// continuous feed throughout.
	Slot Slot
	// MissingDocRetry is `[replicator] missing_doc_retry_msec`: how long to
	// wait before refetching a revision the source answered `{"missing":…}`
	// for, or whose write the target refused with 412 missing_stub
	// (0 = 2 s, CouchDB's default).
	MissingDocRetry time.Duration
	// Woken tells a run with a Slot that it starts because its source
	// changed while its job was parked: it reads its first changes in
	// rounds, as if its slot had just been asked for, not on a continuous
	// feed. The jobs parked on one source are woken by the same write:
	// their first rounds share one read of the source (and reuse pooled
	// connections) instead of opening a feed each.
	Woken bool
	// Resume, when set, is what an earlier run of the same replication
	// left (OnResume): the run starts from it with one request if the
	// source's checkpoint confirms it, else as without it.
	Resume *Resume
	// OnResume, when set, is called as a continuous run that uses
	// checkpoints returns ErrIdle or ErrStopped with its final checkpoint
	// written, with what the next run can start from (Options.Resume).
	OnResume func(*Resume)
	// StallTimeout, when positive, ends a run that is behind its source
	// and completes no batch for this long with an Error of kind
	// "stalled" (see stall.go). 0: no watch.
	StallTimeout time.Duration
	// Fence, when set, is checked before every request the run sends and
	// every piece of a request body (couchclient.WithFence): once it
	// fails, the run writes nothing more, on either endpoint. A runner
	// that may lose its job (a lease on a shared queue) sets it.
	Fence couchclient.Fence
	// BeforeCheckpoint, when set, is called right before each checkpoint
	// is written, with the stats it records: the runner proves there that
	// it still owns the job. ErrSkipCheckpoint leaves this checkpoint out
	// (the next one is tried at the next interval); any other error fails
	// the run.
	BeforeCheckpoint func(ctx context.Context, s Stats) error
}

// ErrSkipCheckpoint, from Options.BeforeCheckpoint, leaves a checkpoint out
// without failing the run.
var ErrSkipCheckpoint = errors.New("checkpoint left out: the runner could not prove it owns the job")

// Slot is a continuous run's claim on one of the job server's slots.
type Slot interface {
	// Yield receives when the job server asks for the slot (a job waits
	// for one).
	Yield() <-chan struct{}
	// Next returns a channel closed at the first change of the source
	// after the call; false when the source cannot be watched (the run
	// then keeps its slot and its feed).
	Next() (<-chan struct{}, bool)
	// Release hands the slot on; the run reads nothing until Acquire.
	Release()
	// Acquire waits for a slot.
	Acquire(ctx context.Context) error
}

// Result is the final checkpoint body of a one-shot replication, as
// POST /_replicate answers it, and the final stats.
type Result struct {
	// Body is {"session_id","source_last_seq","replication_id_version":4,"history":[…]},
	// possibly with "no_changes":true, or {"use_checkpoints":false}.
	Body  json.RawMessage
	Stats Stats
}

// ErrStopped is returned by Run when ctx was cancelled and the final checkpoint was written.
var ErrStopped = errors.New("replication stopped")

// ErrIdle is returned by Run when a continuous run ended because it was
// caught up and idle for Options.IdleAfter; its final checkpoint was
// written, so a later run resumes where it stopped.
var ErrIdle = errors.New("replication idle: caught up and no change for a while")

// ErrAbandoned, as the cause of ctx's cancellation
// (context.WithCancelCause), makes Run stop at once: in-flight requests are
// cancelled and no final checkpoint is written. A runner uses it when it
// may no longer own the job (its lock could not be renewed), so that it
// stops writing before another runner can take the job.
var ErrAbandoned = errors.New("replication abandoned: job lock not renewed")

// Error is a replication failure in CouchDB's words.
type Error struct {
	// Kind is CouchDB's error atom: db_not_found, unauthorized, forbidden,
	// filter_fetch_error, changes_req_failed, revs_diff_failed, bulk_docs_failed,
	// doc_write_failed, open_doc_revs_failed, checkpoint_commit_failure, http_request_failed, …
	Kind string
	// Reason says what failed; it never contains a password.
	Reason string
	// Fatal errors will not go away by retrying (bad filter, unauthorized).
	Fatal bool
}

// Error returns Kind + ": " + Reason.
func (e *Error) Error() string { return e.Kind + ": " + e.Reason }

// HTTPStatus is the status a server answers e with when it is the client's
// request that failed (POST /_replicate), as CouchDB 3.5's chttpd does: 404
// for a missing filter, 401 and 403 as the endpoint said, 500 otherwise
// (db_not_found included). jobdata.Record.Failure answers the same for a
// failure recorded in a job.
func (e *Error) HTTPStatus() int {
	switch e.Kind {
	case "filter_fetch_error":
		return 404
	case "unauthorized":
		return 401
	case "forbidden":
		return 403
	}
	return 500
}

// CouchError returns the "error" and "reason" members of that answer
// (hooks.AsError reads them): not_found for a missing filter, else Kind.
func (e *Error) CouchError() (name, reason string) {
	if e.Kind == "filter_fetch_error" {
		return "not_found", e.Reason
	}
	return e.Kind, e.Reason
}

func newError(kind, reason string, fatal bool) *Error {
	return &Error{Kind: kind, Reason: reason, Fatal: fatal}
}
