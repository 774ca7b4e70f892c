package sdk

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
)

// chunkSize is the largest body chunk sent in one stream message.
const chunkSize = 32 << 10

// User returns the user context of a request forwarded by the host (the
// caller authenticated by the server); anonymous when there is none.
func User(r *http.Request) hooks.UserCtx { return hooks.UserFrom(r.Context()) }

// WithUser returns a copy of ctx carrying u, as User reads it; useful to
// test a plugin's handler without a host. It is hooks.WithUser: the host
// and the sdk use one context key.
func WithUser(ctx context.Context, u hooks.UserCtx) context.Context {
	return hooks.WithUser(ctx, u)
}

// serveHTTP turns a ServeHTTP stream into a call of h: the request body is
// read from the stream as the handler consumes it and the response is sent
// back in chunks, at least at every Flush.
func serveHTTP(h http.Handler, stream pb.Plugin_ServeHTTPServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	head := first.GetHead()
	if head == nil {
		return wire.ToStatus(&hooks.Error{Status: 400, Err: "bad_request", Reason: "missing request head"})
	}
	target := head.GetPath()
	if head.GetRawQuery() != "" {
		target += "?" + head.GetRawQuery()
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return wire.ToStatus(&hooks.Error{Status: 400, Err: "bad_request", Reason: "invalid request path"})
	}
	ctx := WithUser(stream.Context(), wire.UserCtxFromPB(head.GetUser()))
	hdr := make(http.Header, len(head.GetHeaders()))
	for _, h := range head.GetHeaders() {
		hdr[h.GetName()] = h.GetValues()
	}
	body, pw := io.Pipe()
	req := (&http.Request{
		Method:     head.GetMethod(),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Body:       body,
		Host:       head.GetHost(),
		RemoteAddr: head.GetRemoteAddr(),
		RequestURI: target,
	}).WithContext(ctx)
	req.ContentLength = -1
	if cl := hdr.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil {
			req.ContentLength = n
		}
	}
	go func() {
		if b := first.GetBody(); len(b) > 0 {
			if _, err := pw.Write(b); err != nil {
				return
			}
		}
		for {
			part, err := stream.Recv()
			if err == io.EOF {
				pw.Close()
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(part.GetBody()); err != nil {
				return
			}
		}
	}()
	w := &responseWriter{stream: stream, header: http.Header{}}
	h.ServeHTTP(w, req)
	body.Close()
	w.finish()
	return w.err
}

// responseWriter streams a handler's response back to the host.
type responseWriter struct {
	stream   pb.Plugin_ServeHTTPServer
	header   http.Header
	status   int
	headSent bool
	buf      []byte
	err      error
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		if w.header.Get("Content-Type") == "" {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		room := chunkSize - len(w.buf)
		if room > len(p) {
			room = len(p)
		}
		w.buf = append(w.buf, p[:room]...)
		p = p[room:]
		if len(w.buf) == chunkSize {
			w.send()
			if w.err != nil {
				return n - len(p), w.err
			}
		}
	}
	return n, nil
}

// Flush sends the head and everything written so far; the host flushes it
// to its client at once.
func (w *responseWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent || len(w.buf) > 0 {
		w.send()
	}
}

func (w *responseWriter) send() {
	if w.err != nil {
		return
	}
	part := &pb.HTTPResponsePart{Body: w.buf}
	if !w.headSent {
		head := &pb.HTTPResponseHead{Status: int32(w.status)}
		for k, v := range w.header {
			head.Headers = append(head.Headers, &pb.Header{Name: k, Values: v})
		}
		part.Head = head
		w.headSent = true
	}
	w.err = w.stream.Send(part)
	w.buf = w.buf[:0]
	if cap(w.buf) < chunkSize {
		w.buf = make([]byte, 0, chunkSize)
	}
}

func (w *responseWriter) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent || len(w.buf) > 0 {
		w.send()
	}
}
