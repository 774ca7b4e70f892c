package jobdata

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// Record formats. Every record holds the format it was written in (its
// "format" member, first); nodes of two versions share one queue during a
// rolling upgrade, and a node runs and rewrites only records of formats up
// to its own: Decode refuses a newer one with a *NewerFormatError before
// reading anything else of it, so a node never misreads such a record nor
// writes it back in its older format (dropping what it does not know).
// The job server gives such a job back untouched, for a node of a newer
// version; monitoring shows it from its Partial record.
//
// Bump Format when a node of the previous version would misread a record
// of the new one or lose something by rewriting it (a new sealing, a
// field whose loss matters); records of older formats must still decode.
// Formats so far: 1, endpoints in plaintext or sealed without a binding
// (s1); 2, sealed and bound to the job (s2). Records written before the
// member existed have none (FormatOf: 0) and are of format 1 or 2.
const Format = format

// ErrNewerFormat: the record was written by a newer version in a format
// this one does not run (see Format). *NewerFormatError is it.
var ErrNewerFormat = errors.New("jobdata: record written by a newer version")

// NewerFormatError is Decode's error for a record of a newer format.
type NewerFormatError struct{ Format int }

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("jobdata: record of format %d, written by a newer version (this one runs formats up to %d)", e.Format, Format)
}

// Is makes a *NewerFormatError ErrNewerFormat.
func (e *NewerFormatError) Is(target error) bool { return target == ErrNewerFormat }

// FormatOf returns the format stored record data says it was written in,
// 0 when it says none (written before formats were recorded). It reads
// only the record's first members.
func FormatOf(data []byte) int {
	f := 0
	jsonscan.Members(data, func(rawKey, val []byte) error {
		if string(rawKey) != `"format"` {
			return nil
		}
		if n, err := strconv.Atoi(string(val)); err == nil && n > 0 {
			f = n
		}
		return errFormatFound
	})
	return f
}

// errFormatFound ends FormatOf's walk at the format member.
var errFormatFound = errors.New("format found")

// checkFormat returns a *NewerFormatError for data of a format newer than
// Format.
func checkFormat(data []byte) error {
	if f := FormatOf(data); f > Format {
		return &NewerFormatError{Format: f}
	}
	return nil
}

// Partial is what this version can show of a record of a newer format:
// the members every format so far keeps (state, ids, node, times, stats,
// history), without the replication (Rep is nil: its endpoints may be
// sealed in a way this version cannot open). It is for showing and for
// duplicate checks only: Encode refuses it, so it is never written back.
func Partial(data []byte) *Record {
	r := &Record{}
	at := struct {
		*Record
		Rep json.RawMessage `json:"rep"`
	}{Record: r}
	if json.Unmarshal(data, &at) != nil {
		s, _ := Summarize(data)
		r = &Record{State: s.State, RepID: s.RepID, DBName: s.DBName, DocID: s.DocID}
	}
	r.Rep = nil
	r.partial = true
	return r
}

// IsPartial reports whether the record is a Partial one.
func (r *Record) IsPartial() bool { return r.partial }
