// Package jobdata is the record the replicator keeps per job in the jobs
// queue (CouchDB 4.x `rep_jobs` job data): the parsed replication with its
// credentials, where it came from, its state, stats and event history.
// The record is stored as JSON with its endpoints (and so every credential)
// sealed (atrest.go); it never leaves the plugin unredacted.
//
// It is the model alone: encoding, decoding and reading records, with no
// store behind them (package jobstore keeps them in the jobs queue), so
// that what only renders records, such as the monitor, needs no store.
package jobdata

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/internal/jsonscan"
	"github.com/couchepi/couchepi/parse"
)

// JobType is the jobs-queue type of every replication job.
const JobType = "rep_jobs"

// Replication job states as CouchDB 4.x names them (shown in _scheduler/*).
const (
	Pending   = "pending"
	Running   = "running"
	Crashing  = "crashing"
	Completed = "completed"
	Failed    = "failed"
)

// States returns every job state in CouchDB's order.
func States() []string { return []string{Pending, Running, Crashing, Completed, Failed} }

// ErrNotFound is returned by readers of records when no job matches an id.
var ErrNotFound = errors.New("jobs: not_found")

// Job history event types.
const (
	EventAdded   = "added"
	EventStarted = "started"
	EventStopped = "stopped"
	EventPending = "pending"
	EventCrashed = "crashed"
	// EventStalled is couchepi's: a run stopped making progress and was
	// restarted (stall_timeout_sec).
	EventStalled = "stalled"
)

// Event is one entry of a job's history (newest first in Record.History).
type Event struct {
	Type      string `json:"type"`
	Timestamp int64  `json:"timestamp"` // unix seconds
	Reason    string `json:"reason,omitempty"`
}

// Record is the job data of one replication job.
type Record struct {
	Rep               *parse.Rep      `json:"rep"`                          // with credentials: never shown as is
	RepID             string          `json:"rep_id,omitempty"`             // "" until the job first ran
	BaseID            string          `json:"base_id,omitempty"`            // RepID without its extension
	DBName            string          `json:"db_name,omitempty"`            // replicator db; "" for transient jobs
	DBUUID            string          `json:"db_uuid,omitempty"`            // its instance uuid
	DocID             string          `json:"doc_id,omitempty"`             // replication doc id; "" for transient jobs
	ErrorCount        int             `json:"error_count"`                  // consecutive crashes (healed after health_threshold)
	Stats             Stats           `json:"rep_stats"`                    // latest stats of the running (or last) run
	State             string          `json:"state"`                        // one of States
	StateInfo         json.RawMessage `json:"state_info,omitempty"`         // error string (crashing/failed), stats (completed) or absent
	StartTime         int64           `json:"start_time"`                   // when the job was added (unix s)
	LastUpdated       int64           `json:"last_updated"`                 // last state change (unix s)
	StatsUpdated      int64           `json:"stats_updated,omitempty"`      // last stats push of the running job (unix s)
	LastStart         int64           `json:"last_start,omitempty"`         // last time a worker started it (unix s)
	LastError         string          `json:"last_error,omitempty"`         // reason of the last crash
	ErrorKind         string          `json:"error_kind,omitempty"`         // CouchDB error name of the last failure (db_not_found, max_backoff…)
	Node              string          `json:"node,omitempty"`               // node running it
	PID               string          `json:"pid,omitempty"`                // worker name while running
	History           []Event         `json:"job_history"`                  // newest first, capped at max_history
	CheckpointHistory json.RawMessage `json:"checkpoint_history,omitempty"` // final checkpoint body of a completed one-shot
	Parked            *Parked         `json:"parked,omitempty"`             // set while a pending continuous job waits for its source to change

	// sealed is the sealed endpoints Decode opened, opened their
	// plaintext and bound the binding it was opened with: Encode keeps
	// sealed while the endpoints and binding are unchanged.
	sealed string
	opened []byte
	bound  []byte
	// partial: read by Partial from a record of a newer format.
	partial bool
}

// Parked is how a continuous job that caught up and idled waits: pending,
// scheduled at jobstore.ParkedTime (never due), until a change of its source after
// Seq makes the waker re-enqueue it at the front of the queue.
type Parked struct {
	Since int64           `json:"since"` // when it was parked (unix s)
	Seq   json.RawMessage `json:"seq"`   // the source seq it had checkpointed
}

// RunningInfo is the `info` of a pending or running job that ran before:
// its stats (CouchDB 3.x), plus "parked_since" for a parked job.
func (r *Record) RunningInfo() json.RawMessage {
	info := r.Stats.RunningInfo()
	if r.Parked == nil {
		return info
	}
	var o jsonobj.Builder
	o.Add("parked_since", ISOTime(r.Parked.Since))
	return append(append(info[:len(info)-1:len(info)-1], ','), o.Raw()[1:]...)
}

// New returns the record of a freshly added job: pending, with an `added` event.
func New(rep *parse.Rep, dbName, dbUUID, docID string, now time.Time) *Record {
	return &Record{
		Rep:         rep,
		DBName:      dbName,
		DBUUID:      dbUUID,
		DocID:       docID,
		State:       Pending,
		StartTime:   now.Unix(),
		LastUpdated: now.Unix(),
		History:     []Event{{Type: EventAdded, Timestamp: now.Unix()}},
	}
}

// NewFailed returns the record of a job whose doc could not be parsed: it is
// stored in state failed with the parse reason so monitoring shows it.
func NewFailed(dbName, dbUUID, docID, reason string, now time.Time) *Record {
	r := New(nil, dbName, dbUUID, docID, now)
	r.State = Failed
	r.ErrorCount = 1
	r.LastError = reason
	r.StateInfo = ErrorInfo(reason)
	return r
}

// StateOf returns the state of encoded record data without decoding the
// rest of it; ok is false when data is not an object with a top-level
// string state. data is trusted to be valid JSON, as Encode writes it.
func StateOf(data []byte) (state string, ok bool) {
	jsonscan.Members(data, func(rawKey, val []byte) error {
		if string(rawKey) != `"state"` || len(val) == 0 || val[0] != '"' {
			return nil
		}
		s, err := jsonscan.Unquote(val)
		if err != nil {
			return nil
		}
		state, ok = s, true
		return errStateFound
	})
	return state, ok
}

// errStateFound ends StateOf's walk at the state member.
var errStateFound = errors.New("state found")

// Summary is what listing a job needs to filter and sort it (its state,
// replication id, replicator db and doc id), read without decoding the
// rest of the record: `_scheduler/jobs`, `_scheduler/docs` and
// `_active_tasks` look at every job but show only a page of them.
type Summary struct {
	State, RepID, DBName, DocID string
	Parked                      bool // a continuous job waiting for its source to change
}

// Summary returns the record's Summary.
func (r *Record) Summary() Summary {
	return Summary{State: r.State, RepID: r.RepID, DBName: r.DBName, DocID: r.DocID, Parked: r.Parked != nil}
}

// ShownState is the state monitoring shows a job in (`_scheduler/*`,
// `_active_tasks`): a parked job is running. It holds no slot, but it is
// replicating as its user sees it (a change of its source wakes it within
// milliseconds), as CouchDB shows a continuous job with nothing to do;
// pending is for jobs that wait for a slot or a retry.
func (s Summary) ShownState() string {
	if s.State == Pending && s.Parked {
		return Running
	}
	return s.State
}

// ShownState is the record's Summary.ShownState.
func (r *Record) ShownState() string { return r.Summary().ShownState() }

// Active reports whether the job is pending, running or crashing.
func (s Summary) Active() bool {
	return s.State == Pending || s.State == Running || s.State == Crashing
}

// Transient reports whether the job came from POST /_replicate.
func (s Summary) Transient() bool { return s.DocID == "" }

// Summarize reads the Summary of encoded record data; ok is false when data
// is not an object with a top-level string state. data is trusted to be
// valid JSON, as Encode writes it.
func Summarize(data []byte) (s Summary, ok bool) {
	jsonscan.Members(data, func(rawKey, val []byte) error {
		var dst *string
		switch string(rawKey) {
		case `"state"`:
			dst = &s.State
		case `"rep_id"`:
			dst = &s.RepID
		case `"db_name"`:
			dst = &s.DBName
		case `"doc_id"`:
			dst = &s.DocID
		case `"parked"`:
			s.Parked = len(val) > 0 && val[0] == '{'
			return nil
		default:
			return nil
		}
		if len(val) > 0 && val[0] == '"' {
			if v, err := jsonscan.Unquote(val); err == nil {
				*dst = v
			}
		}
		return nil
	})
	return s, s.State != ""
}

// Transient reports whether the job came from POST /_replicate.
func (r *Record) Transient() bool { return r.DocID == "" }

// Continuous reports whether the replication is continuous.
func (r *Record) Continuous() bool { return r.Rep != nil && r.Rep.Continuous }

// Active reports whether the job still waits to run or runs (not finished).
func (r *Record) Active() bool { return r.Summary().Active() }

// FoundByID reports whether a lookup by id (`_scheduler/jobs/{id}`, a
// cancel) finds the job: pending, running or crashing, or a `_replicate`
// job that completed, which stays visible until the job server removes it
// (transient_job_max_age_sec). A `_replicate` job that failed is gone, as
// CouchDB 3.x removes it when it crashes (its record is kept only for a
// POST /_replicate waiting on it); `_scheduler/docs` shows finished doc jobs.
func (r *Record) FoundByID() bool {
	return r.Active() || r.Transient() && r.State == Completed
}

// ErrorInfo is the JSON string stored in StateInfo for an error reason.
func ErrorInfo(reason string) json.RawMessage {
	b, _ := json.Marshal(reason)
	return b
}

// ErrorReason returns the error text held in StateInfo, or "" if it holds none.
func (r *Record) ErrorReason() string {
	var s string
	if len(r.StateInfo) > 0 && json.Unmarshal(r.StateInfo, &s) == nil {
		return s
	}
	return ""
}

// The failure a replication restricted by the host policy (see
// parse.Options.Restricts) shows for every failure of its runs, in
// POST /_replicate answers, _scheduler/* and its history: whether an
// endpoint refused the connection, timed out, failed TLS, answered like
// no CouchDB, or was not allowed, its creator cannot tell, so a
// replication is no port scanner. The log keeps the real reason.
const (
	UnreachableKind   = "db_not_found"
	UnreachableReason = "could not open the source or target: it is unreachable, not a CouchDB database, or not allowed"
)

// Failure is the answer POST /_replicate gives for a failed job, as
// CouchDB 3.5's chttpd maps the replication's error: the error name is
// ErrorKind (its "kind: " prefix cut from the reason), or "error" with the
// whole reason when the failure has none; the status is 401 or 403 when an
// endpoint refused the credentials, 404 not_found for a filter that could
// not be fetched, else 500. It agrees with replicate.Error's HTTPStatus
// and CouchError for the failures that reach the job record.
func (r *Record) Failure() (status int, errName, reason string) {
	reason = r.ErrorReason()
	if r.ErrorKind == "" {
		return http.StatusInternalServerError, "error", reason
	}
	status, errName, reason = http.StatusInternalServerError, r.ErrorKind, strings.TrimPrefix(reason, r.ErrorKind+": ")
	switch r.ErrorKind {
	case "unauthorized":
		status = http.StatusUnauthorized
	case "forbidden":
		status = http.StatusForbidden
	case "filter_fetch_error":
		status, errName = http.StatusNotFound, "not_found"
	}
	return status, errName, reason
}

// ISOTime formats unix seconds as CouchDB's UTC timestamp "2006-01-02T15:04:05Z".
func ISOTime(sec int64) string {
	return time.Unix(sec, 0).UTC().Format("2006-01-02T15:04:05Z")
}

// LastStartOrAdded is when the current (or last) run started, or when the
// job was added if it never ran: the `start_time` of completed stats.
func (r *Record) LastStartOrAdded() int64 {
	if r.LastStart != 0 {
		return r.LastStart
	}
	return r.StartTime
}
