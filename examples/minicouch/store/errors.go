package store

import "github.com/couchepi/couchepi/hooks"

// Error is a CouchDB-shaped error: the HTTP status and the "error" and
// "reason" strings CouchDB 3.x sends for the same condition. It is the
// hooks error type, so the store's errors cross the host's hook boundary
// and reach HTTP clients unchanged; errors.Is matches status and name.
type Error = hooks.Error

// Errors the store returns; compare with errors.Is.
var (
	// ErrDBNotFound: the database does not exist.
	ErrDBNotFound = &Error{Status: 404, Err: "not_found", Reason: "Database does not exist."}
	// ErrDBExists: CreateDB on an existing database.
	ErrDBExists = &Error{Status: 412, Err: "file_exists", Reason: "The database could not be created, the file already exists."}
	// ErrNotFound: the document or revision is missing.
	ErrNotFound = &Error{Status: 404, Err: "not_found", Reason: "missing"}
	// ErrDeleted: the document's winning revision is a deletion.
	ErrDeleted = &Error{Status: 404, Err: "not_found", Reason: "deleted"}
	// ErrConflict: the edit does not extend a leaf revision.
	ErrConflict = &Error{Status: 409, Err: "conflict", Reason: "Document update conflict."}
	// ErrDigestMismatch: attachment data does not match its given md5 digest.
	ErrDigestMismatch = &Error{Status: 400, Err: "content_md5_mismatch", Reason: "Possible message corruption."}
	// ErrStop may be returned by iteration callbacks to end iteration early
	// without an error.
	ErrStop = &Error{Status: 0, Err: "stop", Reason: "iteration stopped"}
)

// BadRequest returns a 400 bad_request error with reason.
func BadRequest(reason string) *Error { return &Error{Status: 400, Err: "bad_request", Reason: reason} }

// DocValidation returns a 400 doc_validation error with reason.
func DocValidation(reason string) *Error {
	return &Error{Status: 400, Err: "doc_validation", Reason: reason}
}

// IllegalDocID returns a 400 illegal_docid error with reason.
func IllegalDocID(reason string) *Error {
	return &Error{Status: 400, Err: "illegal_docid", Reason: reason}
}

// MissingStub returns CouchDB's 412 missing_stub error for attachment name of
// document id.
func MissingStub(id, name string) *Error {
	return &Error{Status: 412, Err: "missing_stub", Reason: "Invalid attachment stub in " + id + " for " + name}
}

// errMissingAttachment is the 404 for an attachment a revision does not have.
var errMissingAttachment = &Error{Status: 404, Err: "not_found", Reason: "Document is missing attachment"}
