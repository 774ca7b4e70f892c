package replicate

import (
	"context"
	"encoding/json"
	"io"
	"sync"
)

// A _bulk_docs request of a batch is `{"new_edits":false,"docs":[…]}` around
// ~0.5 MB of docs that already sit in the _bulk_get answers' buffers.
// Copying them into one new body first (allocated, zeroed, then filled)
// was ~5% of the replicator's CPU; docsBody streams the request from the
// docs' own memory instead. The transport copies from it into its socket
// writes either way.

const (
	docsBodyPrefix = `{"new_edits":false,"docs":[`
	docsBodySuffix = "]}"
)

// docsBody is the _bulk_docs body for docs, read by one reader per attempt
// (open). The docs' memory is recycled once the batch is written, so the
// caller detaches the body when Do returns: a reader the transport might
// still hold then reads EOF and never touches the docs again.
type docsBody struct {
	docs []json.RawMessage

	mu       sync.Mutex // held while a reader copies, and by detach
	detached bool
}

// size is the body's length in bytes.
func (b *docsBody) size() int64 {
	n := len(docsBodyPrefix) + len(docsBodySuffix)
	for i, d := range b.docs {
		if i > 0 {
			n++
		}
		n += len(d)
	}
	return int64(n)
}

// open starts a reader at the beginning of the body (couchclient's GetBody).
func (b *docsBody) open(context.Context) (io.ReadCloser, error) {
	return &docsReader{b: b}, nil
}

// detach ends every reader: once it returns, none reads the docs.
func (b *docsBody) detach() {
	b.mu.Lock()
	b.detached = true
	b.mu.Unlock()
}

// segment is the body's k-th piece: the prefix, then each doc with a
// comma between docs, then the suffix; ok is false past the end.
func (b *docsBody) segment(k int) (seg []byte, ok bool) {
	n := len(b.docs)
	switch {
	case k == 0:
		return []byte(docsBodyPrefix), true
	case n == 0 && k == 1, k == 2*n:
		return []byte(docsBodySuffix), true
	case k > 2*n:
		return nil, false
	case k%2 == 1:
		return b.docs[k/2], true
	}
	return []byte{','}, true
}

// docsReader reads a docsBody from the start.
type docsReader struct {
	b   *docsBody
	k   int // current segment
	off int // bytes of it already read
}

// Read copies the next bytes of the body; a detached body reads as ended.
func (r *docsReader) Read(p []byte) (int, error) {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if r.b.detached {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) {
		seg, ok := r.b.segment(r.k)
		if !ok {
			break
		}
		c := copy(p[n:], seg[r.off:])
		n += c
		r.off += c
		if r.off == len(seg) {
			r.k++
			r.off = 0
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Close does nothing: the docs belong to the batch.
func (r *docsReader) Close() error { return nil }
