// Package couchapi is minicouch's CouchDB 3.x HTTP API: server, database,
// document, attachment and replication-protocol endpoints over the store,
// with authentication, `_security` enforcement and the couchepi host's hooks
// called on every write, read, db create and db delete. It speaks HTTP and
// leaves the work to the store, mango (queries) and views (map/reduce).
package couchapi

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/host"
	"github.com/hashicorp/go-hclog"
)

// Hooks is the subset of *host.Host the HTTP layer calls. A server with no
// plugins uses a host with nothing loaded.
type Hooks interface {
	BeforeDocUpdate(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error)
	AfterDocRead(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error)
	AfterDocWrite(ev hooks.DocWrite)
	AfterDBCreate(db, uuid string)
	AfterDBDelete(db, uuid string)
	DBUpdated(db, seq string)
	Subscribed(hook hooks.Hook, db string) bool
	HasRoute(method, path string) bool
	ServeHTTP(w http.ResponseWriter, r *http.Request)
	ActiveTasks(ctx context.Context) []json.RawMessage
	Plugins() []host.PluginStatus
	Load(ctx context.Context, spec host.Spec) error
	Reload(ctx context.Context, name string, spec host.Spec) error
	SetConfig(ctx context.Context, cfg hooks.Config)
}

// Options configure a Server.
type Options struct {
	Store  *store.Store
	Config *config.Config
	// Hooks is the embedded plugin host; it may be set after New with
	// SetHooks (the host needs the Server as its hooks.Services).
	Hooks  Hooks
	Logger hclog.Logger
	// URL is the server's base URL, e.g. "http://127.0.0.1:5984/".
	URL string
	// FauxtonDir serves /_utils/ from this directory when set.
	FauxtonDir string
	// Node is the node name shown in _membership, _node and _scheduler
	// (NodeName when empty).
	Node string
}

// Server is minicouch's HTTP handler. It also implements hooks.Services.
type Server struct {
	mango   mango.Indexes // built Mango indexes
	store   *store.Store
	cfg     *config.Config
	auth    *auth.Authenticator
	hooks   Hooks
	log     hclog.Logger
	url     string
	fauxton string
	node    string
	seqs    seqFormat
	started time.Time
	mx      *httpMetrics
}

// New returns a Server over the given store and config.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Node == "" {
		opts.Node = NodeName
	}
	s := &Server{
		store: opts.Store, cfg: opts.Config, hooks: opts.Hooks, log: opts.Logger,
		url: opts.URL, fauxton: opts.FauxtonDir, node: opts.Node, seqs: seqFormat{node: opts.Node}, started: time.Now(), mx: newHTTPMetrics(),
	}
	s.auth = auth.New(opts.Config, s.lookupUser)
	if opts.Store != nil {
		s.mx.registerStore(opts.Store)
		if opts.Config != nil {
			opts.Store.SetAttachmentPolicy(&attPolicy{cfg: opts.Config})
		}
	}
	return s
}

// SetHooks sets the plugin host after construction.
func (s *Server) SetHooks(h Hooks) { s.hooks = h }

// SetURL sets the server's base URL once the listener is bound.
func (s *Server) SetURL(u string) { s.url = u }

// request is one HTTP request being served.
type request struct {
	w    http.ResponseWriter
	r    *http.Request
	user hooks.UserCtx
	segs []string // unescaped path segments
	raw  string   // escaped path with a single leading slash
}

func (q *request) ctx() context.Context { return q.r.Context() }

// query returns the first value of a query parameter.
func (q *request) query(k string) string { return q.r.URL.Query().Get(k) }

// ServeHTTP authenticates the request, forwards plugin routes to the host
// and dispatches everything else to CouchDB's endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.log.IsDebug() {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: 200}
		w = rec
		defer func() {
			s.log.Debug("request", "method", r.Method, "path", r.URL.EscapedPath(), "query", r.URL.RawQuery,
				"status", rec.status, "error", string(rec.errBody), "took", time.Since(start))
		}()
	}
	start := time.Now()
	rec := s.mx.begin(w)
	w = rec
	defer s.mx.end(rec, r.Method, start)
	w.Header().Set("Server", ServerHeader)
	w.Header().Set("X-Couch-Request-ID", requestID())
	w.Header().Set("X-CouchDB-Body-Time", "0")
	if s.cors(w, r) {
		return
	}
	raw := r.URL.EscapedPath()
	for strings.HasPrefix(raw, "//") {
		raw = raw[1:]
	}
	if raw == "" {
		raw = "/"
	}
	if raw != r.URL.EscapedPath() {
		u := *r.URL
		u.RawPath = raw
		if p, err := url.PathUnescape(raw); err == nil {
			u.Path = p
		}
		r = r.Clone(r.Context())
		r.URL = &u
	}
	user, refresh, aerr := s.auth.Authenticate(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if refresh != "" {
		w.Header().Add("Set-Cookie", s.auth.SetCookieHeader(r, refresh, time.Now()))
	}
	if user.Name == "" && raw != "/_session" && raw != "/_up" &&
		s.cfg.GetDefault("chttpd", "require_valid_user", "false") == "true" {
		writeError(w, &hooks.Error{Status: 401, Err: "unauthorized", Reason: "Authentication required."})
		return
	}
	if herr := s.limitBody(w, r); herr != nil {
		writeError(w, herr)
		return
	}
	if s.hooks != nil && s.hooks.HasRoute(r.Method, raw) {
		s.hooks.ServeHTTP(w, r.WithContext(host.WithUser(r.Context(), user)))
		return
	}
	segs, ok := splitPath(raw)
	if !ok {
		writeError(w, badRequest("invalid URL path"))
		return
	}
	q := &request{w: w, r: r, user: user, segs: segs, raw: raw}
	if len(segs) == 0 {
		s.handleWelcome(q)
		return
	}
	if strings.HasPrefix(segs[0], "_") && !systemDBs[segs[0]] {
		s.serveServer(q)
		return
	}
	s.serveDB(q)
}

// splitPath splits an escaped path into unescaped segments; %2F inside a
// segment stays part of it. A trailing slash is ignored.
func splitPath(raw string) ([]string, bool) {
	raw = strings.TrimPrefix(raw, "/")
	if raw == "" {
		return nil, true
	}
	parts := strings.Split(raw, "/")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, false
		}
		parts[i] = u
	}
	return parts, true
}

// statusRecorder remembers the status of a response for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	errBody []byte // start of an error response's body
}

// Write keeps the start of error bodies for the access log.
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status >= 400 && len(r.errBody) < 200 {
		n := min(len(b), 200-len(r.errBody))
		r.errBody = append(r.errBody, b[:n]...)
	}
	return r.ResponseWriter.Write(b)
}

// WriteHeader records the status.
func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Flush lets feeds flush through the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// requestID returns CouchDB's 10-hex-digit request id.
func requestID() string {
	const hexDigits = "0123456789abcdef"
	n := rand.Uint64()
	b := make([]byte, 10)
	for i := range b {
		b[i] = hexDigits[n&15]
		n >>= 4
	}
	return string(b)
}
