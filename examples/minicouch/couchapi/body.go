package couchapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonscan"
)

// maxRequestSize is `[chttpd] max_http_request_size` (default 4 GiB).
func (s *Server) maxRequestSize() int64 {
	return s.cfg.Int("chttpd", "max_http_request_size", 4294967296)
}

// limitBody caps the request body at max_http_request_size; a declared
// Content-Length above it is refused at once with 413.
func (s *Server) limitBody(w http.ResponseWriter, r *http.Request) *hooks.Error {
	max := s.maxRequestSize()
	if r.ContentLength > max {
		return errTooLarge
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, max)
	}
	inflateBody(r, max)
	return nil
}

// requireJSONType enforces Content-Type application/json (CouchDB's
// validate_ctype): 415 bad_content_type otherwise.
func requireJSONType(r *http.Request) *hooks.Error {
	ct := r.Header.Get("Content-Type")
	mt, _, _ := strings.Cut(ct, ";")
	if strings.TrimSpace(strings.ToLower(mt)) != "application/json" {
		return errBadCtypeJSON
	}
	return nil
}

// mediaType returns the lower-cased media type of the Content-Type header.
func mediaType(r *http.Request) (string, map[string]string) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return "", nil
	}
	return strings.ToLower(mt), params
}

// readBody reads the whole request body; a body beyond the size limit is
// 413 too_large.
func readBody(r *http.Request) ([]byte, *hooks.Error) {
	if r.Body == nil {
		return nil, nil
	}
	if herr := checkEncoding(r); herr != nil {
		return nil, herr
	}
	var b []byte
	var err error
	if n := r.ContentLength; n > 0 && n <= maxPresizedBody {
		// One allocation of the declared size (io.ReadAll grows from
		// 512 bytes by copying: ~20 allocations for a 0.5 MB _bulk_docs).
		// The extra MinRead bytes let the read see EOF without growing.
		buf := bytes.NewBuffer(make([]byte, 0, n+bytes.MinRead))
		_, err = buf.ReadFrom(r.Body)
		b = buf.Bytes()
	} else {
		b, err = io.ReadAll(r.Body)
	}
	if err != nil {
		return nil, bodyReadError(err)
	}
	return b, nil
}

// bodyReadError is the answer to a failed body read: 413 past the size
// limit, 400 for a body that is not the gzip it says it is, else 400.
func bodyReadError(err error) *hooks.Error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return errTooLarge
	case errors.Is(err, errBadGzip):
		return errNotGzipped
	}
	return badRequest("could not read the request body")
}

// _bulk_docs bodies (~0.5 MB for a replicator's batch of 500 docs) were a
// third of the bytes a target allocated while replicating: each a fresh,
// zeroed buffer, dropped once the request was answered. The handler now
// reads them into buffers it gives back when it is done.

// Bounds of the bodies read into recycled buffers: smaller ones are cheap
// to allocate, larger ones would keep too much memory in the free list.
const (
	minRecycledBody = 64 << 10
	maxRecycledBody = 8 << 20
)

// freeBodies holds request body buffers given back by releaseBody.
var freeBodies = make(chan []byte, 8)

// readBodyRecycled is readBody into a recycled buffer when the declared
// Content-Length is within the recycled bounds. The caller must call
// releaseBody(b) once nothing refers to b's memory any more (the handler
// is done with everything it parsed from it, in place or not).
func readBodyRecycled(r *http.Request) ([]byte, *hooks.Error) {
	n := r.ContentLength
	if r.Body == nil || n < minRecycledBody || n > maxRecycledBody {
		return readBody(r)
	}
	if herr := checkEncoding(r); herr != nil {
		return nil, herr
	}
	var buf []byte
	select {
	case buf = <-freeBodies:
		if int64(cap(buf)) < n+bytes.MinRead {
			buf = nil
		}
	default:
	}
	if buf == nil {
		buf = make([]byte, 0, n+bytes.MinRead)
	}
	bb := bytes.NewBuffer(buf[:0])
	if _, err := bb.ReadFrom(r.Body); err != nil {
		return nil, bodyReadError(err)
	}
	return bb.Bytes(), nil
}

// releaseBody gives a body read by readBodyRecycled back for reuse.
func releaseBody(b []byte) {
	if cap(b) < minRecycledBody || cap(b) > maxRecycledBody+bytes.MinRead {
		return
	}
	select {
	case freeBodies <- b[:0]:
	default:
	}
}

// maxPresizedBody bounds the buffer readBody allocates up front from a
// request's Content-Length (a larger body grows as it arrives).
const maxPresizedBody = 64 << 20

// validJSON reports whether b is one valid UTF-8 JSON value.
func validJSON(b []byte) bool {
	return utf8.Valid(b) && jsonValid(b)
}

// jsonError is the answer to a body that is not valid UTF-8 JSON: CouchDB's
// `invalid UTF-8 JSON`, unless it is JSON nested deeper than minicouch
// reads (jsonscan.MaxDepth), which the reason then says.
func jsonError(b []byte) *hooks.Error {
	if jsonscan.TooDeep(b) {
		return errTooDeep
	}
	return errInvalidJSON
}

// readJSONRequest checks the Content-Type, then reads the body into v:
// the 415 for a wrong type comes before anything about the body.
func readJSONRequest(r *http.Request, v any) *hooks.Error {
	if herr := requireJSONType(r); herr != nil {
		return herr
	}
	return readJSONBody(r, v)
}

// readJSONBody reads and decodes a JSON body into v; malformed input is
// CouchDB's 400 bad_request `invalid UTF-8 JSON`.
func readJSONBody(r *http.Request, v any) *hooks.Error {
	b, herr := readBody(r)
	if herr != nil {
		return herr
	}
	return decodeJSON(b, v)
}

// decodeJSON decodes b into v with CouchDB's error for malformed input
// (json.Unmarshal checks the syntax before decoding: one pass).
func decodeJSON(b []byte, v any) *hooks.Error {
	if !utf8.Valid(b) {
		return errInvalidJSON
	}
	if err := json.Unmarshal(b, v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || len(bytes.TrimSpace(b)) == 0 {
			return jsonError(b)
		}
		return typeError(err)
	}
	return nil
}

// fieldTypeReasons are CouchDB's words for a request member of the wrong
// JSON type, by member.
var fieldTypeReasons = map[string]string{
	"doc_ids":  "`doc_ids` filter parameter is not a list of doc ids.",
	"keys":     "`keys` member must be an array.",
	"docs":     "`docs` parameter must be an array.",
	"selector": "Selector error: expected a JSON object",
}

// typeError says in CouchDB's words, never Go's, that a well-formed body
// has a value of the wrong type: the whole body ("Request body must be a
// JSON object"), or one member.
func typeError(err error) *hooks.Error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return badRequest("Invalid request body")
	}
	if te.Field == "" {
		if te.Type.Kind() == reflect.Slice {
			return badRequest("Request body must be a JSON array")
		}
		return badRequest("Request body must be a JSON object")
	}
	top, _, _ := strings.Cut(te.Field, ".")
	if r, ok := fieldTypeReasons[top]; ok {
		return badRequest(r)
	}
	return badRequest("Invalid value for `" + te.Field + "`: expected " + jsonKind(te.Type) + ".")
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	if t.Kind() >= reflect.Int && t.Kind() <= reflect.Float64 {
		return "a number"
	}
	return "another type"
}
