package couchclient

import (
	"context"
	"errors"
	"io"
)

// ErrFenced is the error of a request refused because its context's fence
// said no: the runner no longer surely owns the job it was sent for.
var ErrFenced = errors.New("request not sent: this node no longer holds the job")

// A Fence reports whether requests may still be sent: nil while they may.
// It must be cheap (it runs before every request and every read of a
// request body) and safe for concurrent use. A fence based on a lease must
// count the time the machine was suspended (jobs.Lease.Valid does): the
// monotonic clock stops then. It cannot recall what the transport already
// handed to the kernel (see docs/cluster.md).
type Fence func() error

type fenceKey struct{}

// WithFence returns a context whose requests check fence before they are
// sent and before each piece of their body is handed to the connection,
// so a runner that lost its job (say, paused past its lease) does not
// complete a single request after it resumes: a request whose body read
// fails is abandoned by the transport before the server has all of it.
func WithFence(ctx context.Context, fence Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, fence)
}

// fenceOf returns ctx's fence, nil when it has none.
func fenceOf(ctx context.Context) Fence {
	f, _ := ctx.Value(fenceKey{}).(Fence)
	return f
}

// check returns ErrFenced, wrapping the fence's reason, once the fence
// says no.
func (f Fence) check() error {
	if f == nil {
		return nil
	}
	if err := f(); err != nil {
		return errors.Join(ErrFenced, err)
	}
	return nil
}

// fencedReader checks the fence before every read of a request body.
type fencedReader struct {
	r     io.Reader
	fence Fence
}

func (f *fencedReader) Read(p []byte) (int, error) {
	if err := f.fence.check(); err != nil {
		return 0, err
	}
	return f.r.Read(p)
}

// WriteTo keeps the body's own WriteTo (see resettingReader's), the
// fence checked before every piece.
func (f *fencedReader) WriteTo(w io.Writer) (int64, error) {
	return writeThrough(f.r, w, f.fence.check)
}

func (f *fencedReader) Close() error {
	if c, ok := f.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
