package couchapi

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// ServerHeader is the Server header CouchDB 3.5 sends.
const ServerHeader = "CouchDB/3.5.0 (Erlang OTP/26)"

// Common CouchDB errors of the HTTP layer.
var (
	errInvalidJSON  = &hooks.Error{Status: 400, Err: "bad_request", Reason: "invalid UTF-8 JSON"}
	errTooDeep      = &hooks.Error{Status: 400, Err: "bad_request", Reason: jsonobj.ErrTooDeep.Error()}
	errBadRev       = &hooks.Error{Status: 400, Err: "bad_request", Reason: "Invalid rev format"}
	errTooLarge     = &hooks.Error{Status: 413, Err: "too_large", Reason: "the request entity is too large"}
	errBadCtypeJSON = &hooks.Error{Status: 415, Err: "bad_content_type", Reason: "Content-Type must be application/json"}
	errMissing      = &hooks.Error{Status: 404, Err: "not_found", Reason: "missing"}
	errDBMissing    = &hooks.Error{Status: 404, Err: "not_found", Reason: "Database does not exist."}
	errBadSince     = &hooks.Error{Status: 400, Err: "bad_request", Reason: "Malformed sequence supplied in 'since' parameter."}
	errUnderscoreID = &hooks.Error{Status: 400, Err: "illegal_docid", Reason: "Only reserved document ids may start with underscore."}
)

func methodNotAllowed(allowed string) *hooks.Error {
	return &hooks.Error{Status: 405, Err: "method_not_allowed", Reason: "Only " + allowed + " allowed"}
}

func badRequest(reason string) *hooks.Error {
	return &hooks.Error{Status: 400, Err: "bad_request", Reason: reason}
}

// asCouchError converts any error into a CouchDB-shaped error; a body over
// the size limit is CouchDB's 413.
func asCouchError(err error) *hooks.Error {
	var he *hooks.Error
	if errors.As(err, &he) {
		return he
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errTooLarge
	}
	return hooks.AsError(err)
}

// setCommonHeaders sets the headers every CouchDB JSON response carries.
func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "must-revalidate")
}

// writeJSON sends v as CouchDB does: compact JSON followed by a newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := jsonobj.Marshal(v)
	if err != nil {
		writeError(w, fmt.Errorf("encode response: %w", err))
		return
	}
	writeRawJSON(w, status, b)
}

// etagOf is an opaque ETag for the given parts (CouchDB's are md5 hashes
// of what the answer depends on).
func etagOf(parts ...string) string {
	h := md5.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return `"` + hex.EncodeToString(h.Sum(nil)) + `"`
}

// notModified sets etag and reports whether the request's If-None-Match
// names it, in which case it has answered 304.
func notModified(w http.ResponseWriter, r *http.Request, etag string) bool {
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	return false
}

// writeRawJSON sends pre-encoded JSON.
func writeRawJSON(w http.ResponseWriter, status int, b []byte) {
	setJSONHeaders(w)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// writeError sends err as {"error":…,"reason":…} with its status.
func writeError(w http.ResponseWriter, err error) {
	ce := asCouchError(err)
	if ce.Status == 401 {
		w.Header().Set("WWW-Authenticate", `Basic realm="server"`)
	}
	writeJSON(w, ce.Status, ce)
}

// okJSON is CouchDB's {"ok":true}.
var okJSON = map[string]bool{"ok": true}
