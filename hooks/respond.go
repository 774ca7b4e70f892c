package hooks

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// HTTPStatus returns e's HTTP status; errors that carry a status this way
// are recognised by AsError (kivik names the method the same).
func (e *Error) HTTPStatus() int { return e.Status }

// Is reports whether target is an *Error with the same status and error
// name and, unless target's reason is empty, the same reason: errors.Is(err,
// &Error{Status: 404, Err: "not_found"}) matches any not_found whatever its
// reason, while a sentinel with a reason (a missing doc, a deleted one, a
// missing database) matches only itself.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status && t.Err == e.Err && (t.Reason == "" || t.Reason == e.Reason)
}

// AsError returns the CouchDB-shaped error err carries: the first *Error in
// its chain; otherwise, for an error with the methods HTTPStatus() int and
// CouchError() (name, reason string), the answer they give (so a package
// can type its errors without importing hooks); otherwise, for an error
// with an HTTPStatus method, that status with CouchDB's generic error name
// and err's text as reason; otherwise 500 unknown_error.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var c interface {
		HTTPStatus() int
		CouchError() (name, reason string)
	}
	if errors.As(err, &c) && c.HTTPStatus() >= 400 {
		name, reason := c.CouchError()
		return &Error{Status: c.HTTPStatus(), Err: name, Reason: reason}
	}
	var s interface{ HTTPStatus() int }
	if errors.As(err, &s) && s.HTTPStatus() >= 400 {
		return &Error{Status: s.HTTPStatus(), Err: errorName(s.HTTPStatus()), Reason: err.Error()}
	}
	return &Error{Status: http.StatusInternalServerError, Err: "unknown_error", Reason: err.Error()}
}

// errorName is CouchDB's "error" member for a bare status.
func errorName(status int) string {
	switch status {
	case 400:
		return "bad_request"
	case 401:
		return "unauthorized"
	case 403:
		return "forbidden"
	case 404:
		return "not_found"
	case 405:
		return "method_not_allowed"
	case 409:
		return "conflict"
	case 412:
		return "precondition_failed"
	case 413:
		return "too_large"
	case 415:
		return "bad_content_type"
	}
	return "unknown_error"
}

// WriteJSON answers with v as CouchDB does: compact JSON without HTML
// escaping, then a newline, with Content-Type: application/json and
// Cache-Control: must-revalidate.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := jsonobj.Marshal(v)
	if err != nil {
		WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "must-revalidate")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError answers with AsError(err): its status and CouchDB's
// {"error":…,"reason":…} body.
func WriteError(w http.ResponseWriter, err error) {
	e := AsError(err)
	WriteJSON(w, e.Status, e)
}
