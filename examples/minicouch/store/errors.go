package store

import "fmt"

// Error is a CouchDB-shaped error: the HTTP status and the "error" and
// "reason" strings CouchDB 3.x sends for the same condition.
type Error struct {
	Status int
	Err    string
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Err, e.Reason)
}

// Is reports whether target is an *Error with the same status and error
// string, so errors.Is(err, ErrNotFound) matches any 404 not_found.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status && t.Err == e.Err
}

// Errors the store returns; compare with errors.Is.
var (
	// ErrDBNotFound: the database does not exist.
	ErrDBNotFound = &Error{404, "not_found", "Database does not exist."}
	// ErrDBExists: CreateDB on an existing database.
	ErrDBExists = &Error{412, "file_exists", "The database could not be created, the file already exists."}
	// ErrNotFound: the document or revision is missing.
	ErrNotFound = &Error{404, "not_found", "missing"}
	// ErrDeleted: the document's winning revision is a deletion.
	ErrDeleted = &Error{404, "not_found", "deleted"}
	// ErrConflict: the edit does not extend a leaf revision.
	ErrConflict = &Error{409, "conflict", "Document update conflict."}
	// ErrDigestMismatch: attachment data does not match its given md5 digest.
	ErrDigestMismatch = &Error{400, "content_md5_mismatch", "Possible message corruption."}
	// ErrStop may be returned by iteration callbacks to end iteration early
	// without an error.
	ErrStop = &Error{0, "stop", "iteration stopped"}
)

// BadRequest returns a 400 bad_request error with reason.
func BadRequest(reason string) *Error { return &Error{400, "bad_request", reason} }

// DocValidation returns a 400 doc_validation error with reason.
func DocValidation(reason string) *Error { return &Error{400, "doc_validation", reason} }

// IllegalDocID returns a 400 illegal_docid error with reason.
func IllegalDocID(reason string) *Error { return &Error{400, "illegal_docid", reason} }

// MissingStub returns CouchDB's 412 missing_stub error for attachment name of
// document id.
func MissingStub(id, name string) *Error {
	return &Error{412, "missing_stub", "Invalid attachment stub in " + id + " for " + name}
}

// errMissingAttachment is the 404 for an attachment a revision does not have.
var errMissingAttachment = &Error{404, "not_found", "Document is missing attachment"}
