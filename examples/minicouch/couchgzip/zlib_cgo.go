//go:build cgo && !nozlib

package couchgzip

/*
#cgo LDFLAGS: -lz
#include <stdlib.h>
#include <zlib.h>

// couchgzip_new allocates a deflate stream with CouchDB's parameters
// (couch_stream's gzip_init: windowBits 16+15, memLevel 8, default
// strategy) in C memory.
static z_stream *couchgzip_new(int level, int *ret) {
	z_stream *s = calloc(1, sizeof(z_stream));
	if (s == NULL) {
		*ret = Z_MEM_ERROR;
		return NULL;
	}
	*ret = deflateInit2(s, level, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY);
	if (*ret != Z_OK) {
		free(s);
		return NULL;
	}
	return s;
}

// couchgzip_deflate runs deflate over in[0:inLen] into out[0:outLen] and
// reports how much of each it used. The pointers into Go memory are not
// kept past the call.
static int couchgzip_deflate(z_stream *s, unsigned char *in, size_t inLen,
		unsigned char *out, size_t outLen, int flush, size_t *used, size_t *wrote) {
	s->next_in = in;
	s->avail_in = (uInt)inLen;
	s->next_out = out;
	s->avail_out = (uInt)outLen;
	int r = deflate(s, flush);
	*used = inLen - s->avail_in;
	*wrote = outLen - s->avail_out;
	s->next_in = Z_NULL;
	s->avail_in = 0;
	s->next_out = Z_NULL;
	s->avail_out = 0;
	return r;
}

static void couchgzip_free(z_stream *s) {
	deflateEnd(s);
	free(s);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"unsafe"
)

const couchDBBytes = true

// maxIn bounds the input of one deflate call (zlib counts in uInt).
const maxIn = 1 << 20

type zlibWriter struct {
	w       io.Writer
	s       *C.z_stream // nil once closed
	out     []byte
	err     error // the first error, or errClosed
	cleanup runtime.Cleanup
}

type zstream struct{ s *C.z_stream }

func newWriter(w io.Writer, level int) (io.WriteCloser, error) {
	if level < MinLevel || level > MaxLevel {
		return nil, fmt.Errorf("couchgzip: level %d outside %d..%d", level, MinLevel, MaxLevel)
	}
	var ret C.int
	s := C.couchgzip_new(C.int(level), &ret)
	if s == nil {
		return nil, fmt.Errorf("couchgzip: deflateInit2: zlib error %d", int(ret))
	}
	zw := &zlibWriter{w: w, s: s, out: make([]byte, 32<<10)}
	// A writer dropped without Close still gives zlib's memory back.
	zw.cleanup = runtime.AddCleanup(zw, func(z zstream) { C.couchgzip_free(z.s) }, zstream{s})
	return zw, nil
}

// deflate feeds p (nil at the end) to zlib and writes what it produces.
func (z *zlibWriter) deflate(p []byte, flush C.int) (int, error) {
	n := 0
	for {
		chunk := p[:min(len(p), maxIn)]
		var in *C.uchar
		if len(chunk) > 0 {
			in = (*C.uchar)(unsafe.Pointer(&chunk[0]))
		}
		var used, wrote C.size_t
		r := C.couchgzip_deflate(z.s, in, C.size_t(len(chunk)),
			(*C.uchar)(unsafe.Pointer(&z.out[0])), C.size_t(len(z.out)), flush, &used, &wrote)
		runtime.KeepAlive(chunk)
		p = p[int(used):]
		n += int(used)
		if wrote > 0 {
			if _, err := z.w.Write(z.out[:int(wrote)]); err != nil {
				return n, err
			}
		}
		switch {
		case r == C.Z_STREAM_END:
			return n, nil
		case r == C.Z_BUF_ERROR && used == 0 && wrote == 0 && flush != C.Z_NO_FLUSH,
			r != C.Z_OK && r != C.Z_BUF_ERROR:
			return n, fmt.Errorf("couchgzip: deflate: zlib error %d", int(r))
		}
		// zlib is done with this input when it consumed all of it and
		// did not fill the output buffer.
		if flush == C.Z_NO_FLUSH && len(p) == 0 && int(wrote) < len(z.out) {
			return n, nil
		}
	}
}

// Write implements io.Writer.
func (z *zlibWriter) Write(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := z.deflate(p, C.Z_NO_FLUSH)
	if err != nil {
		z.err = err
	}
	return n, err
}

var errClosed = errors.New("couchgzip: write to a closed writer")

// Close ends the gzip stream and frees the compressor. After a failed
// Write it only frees the compressor and returns that failure.
func (z *zlibWriter) Close() error {
	if z.s == nil {
		if z.err == errClosed {
			return nil
		}
		return z.err
	}
	err := z.err
	if err == nil {
		_, err = z.deflate(nil, C.Z_FINISH)
	}
	z.cleanup.Stop()
	C.couchgzip_free(z.s)
	z.s = nil
	if err != nil {
		z.err = err
		return err
	}
	z.err = errClosed
	return nil
}
