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
