package hooks

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
)

// statusOnly carries a status the way kivik's errors do.
type statusOnly struct{ status int }

func (e statusOnly) Error() string   { return "status only" }
func (e statusOnly) HTTPStatus() int { return e.status }

// named carries its whole answer, as replicate.Error does.
type named struct{ statusOnly }

func (e named) CouchError() (string, string) { return "db_not_found", "could not open db" }

func TestAsError(t *testing.T) {
	forbidden := Forbidden("no")
	tests := []struct {
		name string
		err  error
		want Error
	}{
		{"an *Error", forbidden, *forbidden},
		{"a wrapped *Error", fmt.Errorf("ctx: %w", forbidden), *forbidden},
		{"status and name", fmt.Errorf("ctx: %w", named{statusOnly{404}}), Error{Status: 404, Err: "db_not_found", Reason: "could not open db"}},
		{"status only", statusOnly{409}, Error{Status: 409, Err: "conflict", Reason: "status only"}},
		{"a success status is no answer", statusOnly{200}, Error{Status: 500, Err: "unknown_error", Reason: "status only"}},
		{"untyped", errors.New("boom"), Error{Status: 500, Err: "unknown_error", Reason: "boom"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AsError(tt.err); *got != tt.want {
				t.Errorf("AsError = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

// TestWriteError: the body is CouchDB's shape, not HTML-escaped, with the
// error's status.
func TestWriteError(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(w, &Error{Status: 400, Err: "bad_request", Reason: "a <b> & c"})
	if w.Code != 400 || w.Body.String() != `{"error":"bad_request","reason":"a <b> & c"}`+"\n" {
		t.Errorf("WriteError = %d %q", w.Code, w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}

// TestErrorIs (issue 32): errors with the same status and name but other
// reasons are not the same error (a deleted doc is not a missing one, nor
// a missing database), while a target without a reason names the class.
func TestErrorIs(t *testing.T) {
	missing := &Error{Status: 404, Err: "not_found", Reason: "missing"}
	deleted := &Error{Status: 404, Err: "not_found", Reason: "deleted"}
	noDB := &Error{Status: 404, Err: "not_found", Reason: "Database does not exist."}
	class := &Error{Status: 404, Err: "not_found"}
	conflict := &Error{Status: 409, Err: "conflict", Reason: "Document update conflict."}
	tests := []struct {
		err, target error
		want        bool
	}{
		{missing, missing, true},
		{fmt.Errorf("open: %w", deleted), deleted, true},
		{missing, deleted, false},
		{deleted, missing, false},
		{noDB, missing, false},
		{missing, class, true},
		{deleted, class, true},
		{noDB, class, true},
		{conflict, class, false},
		{&Error{Status: 404, Err: "not_found", Reason: "missing"}, missing, true},
	}
	for i, tt := range tests {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("%d: errors.Is(%v, %v) = %v, want %v", i, tt.err, tt.target, got, tt.want)
		}
	}
}
