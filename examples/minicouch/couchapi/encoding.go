package couchapi

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/couchepi/couchepi/hooks"
)

// CouchDB reads JSON request bodies through their Content-Encoding: gzip
// is inflated, identity passes, anything else is refused (chttpd's
// json_body). Clients such as kivik gzip every body they send.

// errNotGzipped is CouchDB's answer to a gzip body that does not inflate.
var errNotGzipped = &hooks.Error{Status: 400, Err: "bad_request", Reason: "Request body is not properly gzipped."}

// errBadGzip marks a read error of a gzip body that is its encoding's fault
// (bad header, corrupt stream, truncation, wrong checksum).
var errBadGzip = errors.New("request body is not properly gzipped")

// contentEncoding is the request's Content-Encoding, lower-cased; "" for
// none or identity.
func contentEncoding(r *http.Request) string {
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	if enc == "identity" {
		return ""
	}
	return enc
}

// checkEncoding refuses a JSON body in an encoding CouchDB does not read:
// 415 bad_content_type "<encoding> is not a supported content encoding.".
func checkEncoding(r *http.Request) *hooks.Error {
	switch enc := contentEncoding(r); enc {
	case "", "gzip":
		return nil
	default:
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			return nil
		}
		return &hooks.Error{Status: 415, Err: "bad_content_type", Reason: r.Header.Get("Content-Encoding") + " is not a supported content encoding."}
	}
}

// inflateBody makes a gzip request body read inflated, with the inflated
// size bounded by max: a small body that inflates past the limit (a gzip
// bomb) ends in an *http.MaxBytesError, as an oversized plain body does,
// and memory never holds more than max bytes of it. An attachment upload
// takes the raw body back from the *gzipBody and stores it encoded, as
// CouchDB does.
func inflateBody(r *http.Request, max int64) {
	if contentEncoding(r) != "gzip" || r.Body == nil || r.Body == http.NoBody {
		return
	}
	r.Body = &gzipBody{raw: r.Body, left: max, max: max, declared: r.ContentLength}
	r.ContentLength = -1 // the declared length is the compressed one
	// From here the body is identity, for handlers and plugin routes alike.
	r.Header.Del("Content-Encoding")
}

// gzipBody inflates a request body lazily, so a handler that never reads
// the body never sees an error of its encoding.
type gzipBody struct {
	raw       io.ReadCloser
	zr        *gzip.Reader
	left, max int64
	declared  int64 // the request's Content-Length (-1: unknown)
}

func (b *gzipBody) Read(p []byte) (int, error) {
	if b.zr == nil {
		zr, err := gzip.NewReader(b.raw)
		if err != nil {
			return 0, gzipError(err)
		}
		b.zr = zr
	}
	if b.left <= 0 {
		// Only an error if there is more to read.
		var one [1]byte
		if n, err := b.zr.Read(one[:]); n == 0 && err == io.EOF {
			return 0, io.EOF
		}
		return 0, &http.MaxBytesError{Limit: b.max}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.zr.Read(p)
	b.left -= int64(n)
	if err != nil && err != io.EOF {
		err = gzipError(err)
	}
	return n, err
}

func (b *gzipBody) Close() error { return b.raw.Close() }

// gzipError keeps the size limit's error as it is (413) and marks every
// other failure as the encoding's (400).
func gzipError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return errors.Join(errBadGzip, err)
}
