//go:build !cgo || nozlib

package couchgzip

import (
	"compress/gzip"
	"fmt"
	"io"
)

// This build has no zlib: attachments are gzipped by Go's compress/gzip.
// The streams are valid gzip but not CouchDB's bytes, so the digests of
// compressed attachments (and the revision ids that include them) differ
// from those CouchDB computes for the same data.
const couchDBBytes = false

func newWriter(w io.Writer, level int) (io.WriteCloser, error) {
	if level < MinLevel || level > MaxLevel {
		return nil, fmt.Errorf("couchgzip: level %d outside %d..%d", level, MinLevel, MaxLevel)
	}
	return gzip.NewWriterLevel(w, level)
}
