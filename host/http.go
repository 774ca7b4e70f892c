package host

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
)

// chunkSize is the largest request body chunk sent in one stream message.
const chunkSize = 32 << 10

// WithUser returns a copy of ctx carrying the authenticated user of a
// request; ServeHTTP forwards it to the plugin (sdk.User reads it there).
// It is hooks.WithUser.
func WithUser(ctx context.Context, u hooks.UserCtx) context.Context {
	return hooks.WithUser(ctx, u)
}

func userFrom(ctx context.Context) hooks.UserCtx { return hooks.UserFrom(ctx) }

// ServeHTTP forwards a request for a plugin route (see HasRoute) to the
// plugin: method, escaped path, query, headers, the body streamed in chunks
// and the user from WithUser. The response streams back and is flushed as
// each chunk arrives, so continuous feeds and large bodies are never
// buffered whole.
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	m := h.route(r.Method, path)
	if m == nil {
		writeError(w, hooks.NotFound("missing"))
		return
	}
	inst := m.cur.Load()
	if inst == nil {
		writeError(w, hooks.ServiceUnavailable("plugin "+m.name+" is not available"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := inst.rpc.ServeHTTP(ctx)
	if err != nil {
		inst.reportTransportError()
		writeError(w, hooks.ServiceUnavailable("plugin "+m.name+" is not available"))
		return
	}
	head := &pb.HTTPRequestHead{Method: r.Method, Path: path, RawQuery: r.URL.RawQuery,
		User: wire.UserCtxToPB(userFrom(r.Context())), RemoteAddr: r.RemoteAddr, Host: r.Host, Proto: r.Proto}
	for k, v := range r.Header {
		head.Headers = append(head.Headers, &pb.Header{Name: k, Values: v})
	}
	if r.ContentLength > 0 && r.Header.Get("Content-Length") == "" {
		head.Headers = append(head.Headers, &pb.Header{Name: "Content-Length", Values: []string{itoa(r.ContentLength)}})
	}
	if err := stream.Send(&pb.HTTPRequestPart{Head: head}); err != nil {
		writeError(w, hooks.ServiceUnavailable("plugin "+m.name+" is not available"))
		return
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		if r.Body != nil {
			buf := make([]byte, chunkSize)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					if stream.Send(&pb.HTTPRequestPart{Body: buf[:n]}) != nil {
						return
					}
				}
				if err != nil {
					break
				}
			}
		}
		stream.CloseSend()
	}()
	defer func() {
		cancel()
		<-sent
	}()

	first, err := stream.Recv()
	if err != nil {
		if ce := wire.FromStatus(err); ce != nil {
			writeError(w, ce)
			return
		}
		m.log.Warn("route call failed", "method", r.Method, "path", path, "error", err)
		writeError(w, hooks.ServiceUnavailable("plugin "+m.name+" did not answer"))
		return
	}
	rh := first.GetHead()
	for _, hd := range rh.GetHeaders() {
		w.Header()[hd.GetName()] = hd.GetValues()
	}
	couchJSONHeaders(w.Header())
	status := int(rh.GetStatus())
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	flusher, _ := w.(http.Flusher)
	part := first
	for {
		if b := part.GetBody(); len(b) > 0 {
			if _, err := w.Write(b); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		part, err = stream.Recv()
		if err != nil {
			if err != io.EOF && r.Context().Err() == nil {
				m.log.Warn("route response ended early", "method", r.Method, "path", path, "error", err)
			}
			return
		}
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// couchJSONHeaders adds what CouchDB 3.5 sends with every answer of these
// endpoints and a plugin's answer or the server may lack: Cache-Control:
// must-revalidate on JSON, a request id and the body time.
func couchJSONHeaders(h http.Header) {
	if h.Get("Cache-Control") == "" && strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		h.Set("Cache-Control", "must-revalidate")
	}
	if h.Get("X-Couch-Request-ID") == "" {
		h.Set("X-Couch-Request-ID", requestID())
	}
	if h.Get("X-CouchDB-Body-Time") == "" {
		h.Set("X-CouchDB-Body-Time", "0")
	}
}

// requestID is a request id as CouchDB makes them: 10 hex digits.
func requestID() string {
	const digits = "0123456789abcdef"
	n := rand.Uint64()
	b := make([]byte, 10)
	for i := range b {
		b[i] = digits[n&15]
		n >>= 4
	}
	return string(b)
}

// writeError writes a CouchDB error response.
func writeError(w http.ResponseWriter, e *hooks.Error) {
	w.Header().Set("Content-Type", "application/json")
	couchJSONHeaders(w.Header())
	w.WriteHeader(e.Status)
	b, _ := json.Marshal(e)
	w.Write(append(b, '\n'))
}
