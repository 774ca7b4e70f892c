// Package couchgzip compresses attachments as CouchDB does: gzip streams
// written by zlib's deflate with CouchDB's parameters (the given level,
// a 32 KiB window with a gzip wrapper, memLevel 8, the default strategy,
// no flush before the end). CouchDB stores a compressible attachment as
// those bytes and its digest is their md5, so a server that wants
// CouchDB's digests (and the revision ids computed from them) must
// produce the very same bytes.
//
// Built with cgo (the default where a C compiler is found), the writer
// deflates through the system zlib (`-lz`; Debian: zlib1g-dev), the
// library CouchDB's Erlang runtime uses, and its output is byte for byte
// CouchDB's. Built without cgo (or with the build tag nozlib), it falls
// back to Go's compress/gzip: the stream is valid gzip and every reader
// inflates it, but its bytes, hence digests, differ from CouchDB's.
//
// Reading uses Go's compress/gzip in every build.
package couchgzip

import (
	"bytes"
	"compress/gzip"
	"io"
)

// CouchDB reports whether this build writes CouchDB's exact bytes (cgo
// over the system zlib) rather than Go's compress/gzip.
const CouchDB = couchDBBytes

// MinLevel and MaxLevel bound the compression levels CouchDB uses:
// `[attachments] compression_level` outside them stores attachments
// uncompressed.
const (
	MinLevel = 1
	MaxLevel = 9
)

// NewWriter returns a writer that gzips what is written to it into w,
// chunk by chunk, at level (MinLevel..MaxLevel). Close writes the end of
// the stream (it does not close w) and releases the compressor; a writer
// must be closed even when the copy into it failed.
func NewWriter(w io.Writer, level int) (io.WriteCloser, error) {
	return newWriter(w, level)
}

// Gzip returns data gzipped at level in one go.
func Gzip(data []byte, level int) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := NewWriter(&buf, level)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		zw.Close()
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// NewReader returns a reader of the inflated content of the gzip stream r.
func NewReader(r io.Reader) (io.ReadCloser, error) {
	return gzip.NewReader(r)
}
