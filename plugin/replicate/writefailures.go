package replicate

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/couchepi/couchepi/internal/repeatlog"
)

// A document the target refuses (its validate_doc_update, its
// max_document_size, …) is counted in doc_write_failures, as in CouchDB;
// couchepi also keeps which ones and why (issue #31): the last
// MaxFailedDocs of them and a count per kind of refusal in the run's
// Stats, a count per kind in the run's Group (Prometheus), and a log line at
// most once a minute per run. With `doc_write_failure: "fail"` the first
// one ends the run instead (ErrDocWriteFailed).

// FailedDoc is one document revision the target refused to store, or the
// replicator skipped (an id longer than max_document_id_length). It is an
// alias of an unnamed struct type so that jobdata.Stats, which Stats
// converts to and from, holds the same type without importing this
// package. It never holds a document body.
type FailedDoc = struct {
	// ID and Rev name the revision (ID cut to 200 bytes; Rev "" when
	// unknown).
	ID  string `json:"id"`
	Rev string `json:"rev,omitempty"`
	// Status is the HTTP status of the refusal: the target's answer to a
	// document written on its own, or for one refused inside a
	// `_bulk_docs` answer the status CouchDB gives that error; 0 when
	// unknown or when the replicator skipped the document itself.
	Status int `json:"status,omitempty"`
	// Error and Reason are the target's "error" and "reason" members
	// (each cut to 200 bytes).
	Error  string `json:"error"`
	Reason string `json:"reason"`
	// Time is when it was refused (unix s).
	Time int64 `json:"time"`
}

// MaxFailedDocs is how many refused documents a job keeps, newest first:
// the same revision refused again (a retried run) counts again but is
// listed once.
const MaxFailedDocs = 10

// failureTextMax bounds the id, error and reason of a FailedDoc, in bytes:
// the list is stored in the job record and bounds its size.
const failureTextMax = 200

// ErrDocWriteFailed is the Error.Kind of a run ended by a refused document
// (`doc_write_failure: "fail"`), CouchDB's atom for a write that failed.
const ErrDocWriteFailed = "doc_write_failed"

// The kinds of refusal: the keys of Stats.DocWriteFailuresByReason and
// the values of the reason label of the Prometheus counter. A fixed set,
// so that neither grows with what targets answer.
const (
	ReasonForbidden    = "forbidden"    // 403, a validate_doc_update's throw({forbidden: …})
	ReasonUnauthorized = "unauthorized" // 401, throw({unauthorized: …})
	ReasonTooLarge     = "too_large"    // 413: max_document_size, max_attachment_size
	ReasonConflict     = "conflict"     // 409
	ReasonBadRequest   = "bad_request"  // 400: invalid attachment names, bad ids
	ReasonMissingStub  = "missing_stub" // 412: an attachment stub the target lacks, also after a refetch
	ReasonIDTooLong    = "id_too_long"  // skipped: longer than max_document_id_length
	ReasonOther        = "other"        // anything else
)

var writeFailureReasons = [...]string{ReasonForbidden, ReasonUnauthorized, ReasonTooLarge, ReasonConflict,
	ReasonBadRequest, ReasonMissingStub, ReasonIDTooLong, ReasonOther}

// WriteFailureReasons returns every kind of refusal, in a fixed order.
func WriteFailureReasons() []string { return append([]string(nil), writeFailureReasons[:]...) }

// writeFailureReason classifies a refusal by the target's error name,
// else by its status.
func writeFailureReason(status int, errName string) string {
	switch errName {
	case "forbidden", "unauthorized", "conflict", "bad_request", "missing_stub", ReasonIDTooLong:
		return errName
	case "too_large", "document_too_large", "attachment_too_large":
		return ReasonTooLarge
	case "illegal_docid":
		return ReasonBadRequest
	}
	switch status {
	case 403:
		return ReasonForbidden
	case 401:
		return ReasonUnauthorized
	case 413:
		return ReasonTooLarge
	case 409:
		return ReasonConflict
	case 400:
		return ReasonBadRequest
	case 412:
		return ReasonMissingStub
	}
	return ReasonOther
}

// bulkErrorStatus is the status CouchDB answers a single write refused
// with errName (chttpd:error_info), 0 when it is not one of those.
func bulkErrorStatus(errName string) int {
	switch errName {
	case "forbidden":
		return 403
	case "unauthorized":
		return 401
	case "conflict":
		return 409
	case "too_large", "document_too_large", "attachment_too_large":
		return 413
	case "bad_request", "illegal_docid":
		return 400
	case "missing_stub":
		return 412
	}
	return 0
}

// failureLog is a run's record of refused documents.
type failureLog struct {
	mu       sync.Mutex
	docs     []FailedDoc // newest first, at most MaxFailedDocs
	byReason map[string]int64
	lines    repeatlog.Failures // one log line a minute
	unlogged int                // refusals since the last line
}

// seed starts the record from what earlier runs left (Options.StartStats).
func (l *failureLog) seed(docs []FailedDoc, byReason map[string]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.docs = append([]FailedDoc(nil), docs[:min(len(docs), MaxFailedDocs)]...)
	l.byReason = nil
	for k, v := range byReason {
		if l.byReason == nil {
			l.byReason = make(map[string]int64, len(byReason))
		}
		l.byReason[k] = v
	}
}

// add records f, of the given kind, at now; it reports whether to log it
// and how many refusals went unlogged before it.
func (l *failureLog) add(f FailedDoc, reason string, now time.Time) (logIt bool, unlogged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byReason == nil {
		l.byReason = make(map[string]int64, 2)
	}
	l.byReason[reason]++
	docs := l.docs[:0:0]
	docs = append(docs, f)
	for _, d := range l.docs {
		if (d.ID != f.ID || d.Rev != f.Rev) && len(docs) < MaxFailedDocs {
			docs = append(docs, d)
		}
	}
	l.docs = docs
	logIt, _, _ = l.lines.Fail(now)
	if !logIt {
		l.unlogged++
		return false, 0
	}
	unlogged, l.unlogged = l.unlogged, 0
	return true, unlogged
}

// snapshot returns copies of the list and the counts (nil when empty).
func (l *failureLog) snapshot() ([]FailedDoc, map[string]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.byReason) == 0 && len(l.docs) == 0 {
		return nil, nil
	}
	var byReason map[string]int64
	if len(l.byReason) > 0 {
		byReason = make(map[string]int64, len(l.byReason))
		for k, v := range l.byReason {
			byReason[k] = v
		}
	}
	return append([]FailedDoc(nil), l.docs...), byReason
}

// docWriteFailed counts a document the target refused, or the run
// skipped, in doc_write_failures and its kind, keeps it in the run's list
// and logs it (the first, then at most one a minute with the count of
// those not logged). With `doc_write_failure: "fail"` it returns the
// error that ends the run, naming the document; else nil.
func (r *run) docWriteFailed(f FailedDoc) error {
	now := time.Now()
	if f.Error == "" && f.Status != 0 { // a refusal without a CouchDB body
		f.Error = strings.ToLower(strings.ReplaceAll(http.StatusText(f.Status), " ", "_"))
	}
	f.ID = clip(f.ID)
	f.Error = clip(f.Error)
	f.Reason = clip(redactAll(f.Reason))
	f.Time = now.Unix()
	reason := writeFailureReason(f.Status, f.Error)
	r.stats.docWriteFailures.Add(1)
	r.group.totals.addFailure(reason)
	if logIt, unlogged := r.stats.failures.add(f, reason, now); logIt {
		r.log.Warn("target refused a document; counted in doc_write_failures (logged at most once a minute)",
			"doc_id", f.ID, "rev", f.Rev, "status", f.Status, "error", f.Error, "reason", f.Reason,
			"doc_write_failures", r.stats.docWriteFailures.Load(), "not_logged", unlogged)
	}
	if !r.rep.FailsOnDocWriteFailure() {
		return nil
	}
	return newError(ErrDocWriteFailed, describeFailure(f)+"; the replication's doc_write_failure is `fail`", false)
}

// idTooLong is the changes reader's onIDTooLong: a change whose id is
// longer than max_document_id_length is skipped and counted.
func (r *run) idTooLong(c change) error {
	return r.docWriteFailed(FailedDoc{ID: idPrefix(c.ID), Rev: firstRev(c), Error: ReasonIDTooLong,
		Reason: fmt.Sprintf("the document id is %d bytes long, longer than max_document_id_length (%d)", len(c.ID), r.opts.MaxDocumentIDLength)})
}

// firstRev is the first revision a change lists ("" for none).
func firstRev(c change) string {
	if len(c.Changes) == 0 {
		return ""
	}
	return c.Changes[0].Rev
}

// isDocWriteFailure reports whether err is a run ended by a refused document.
func isDocWriteFailure(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == ErrDocWriteFailed
}

// describeFailure words a refusal for an error reason.
func describeFailure(f FailedDoc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "document `%s`", f.ID)
	if f.Rev != "" {
		fmt.Fprintf(&b, " revision %s", f.Rev)
	}
	if f.Error == ReasonIDTooLong {
		b.WriteString(" was skipped: ")
		b.WriteString(f.Reason)
		return b.String()
	}
	b.WriteString(" was refused by the target: ")
	if f.Status != 0 {
		fmt.Fprintf(&b, "%d ", f.Status)
	}
	b.WriteString(f.Error)
	if f.Reason != "" {
		b.WriteString(": ")
		b.WriteString(f.Reason)
	}
	return b.String()
}

// clip cuts s to failureTextMax bytes of valid UTF-8, marking the cut.
func clip(s string) string {
	if len(s) <= failureTextMax {
		return s
	}
	return strings.ToValidUTF8(s[:failureTextMax-3], "") + "..."
}
