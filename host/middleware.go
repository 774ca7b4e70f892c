package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// Middleware gives plugins to a CouchDB-compatible server whose write path
// cannot be changed: wrapped around the server's handler, it serves the
// plugins' routes ahead of the server's own, merges the plugins' tasks into
// GET /_active_tasks, calls before_doc_update before the server sees a doc
// write to a subscribed db (refusing it with the plugin's answer), and
// sends after_doc_write, after_db_create, after_db_delete and db_updated
// (with no sequence: the middleware does not see it) once the server has
// answered a write with success.
//
// The doc writes it sees are PUT and DELETE /{db}/{docid} (design docs
// included) and POST /{db}; _bulk_docs, COPY, attachment writes and design
// doc functions that write (_update, _rewrite) to a db subscribed to
// before_doc_update are refused with 501, since letting them through
// would skip the plugin's validation. _local docs pass untouched, as in
// CouchDB.
//
// For a db subscribed to after_doc_read, GET and HEAD /{db}/{docid}
// answer the doc as the plugins return it (its ETag the revision they
// show). A non-admin may only read such a db's docs that way, its info,
// its design docs and attachments (without ETag), its _local docs and its
// _security: every other read there (_all_docs, _design_docs, _changes,
// _find, _bulk_get, _revs_diff, open_revs, views…, in any form) is
// refused with 403, since the middleware cannot pass the docs or
// revisions inside them through the plugins, which may show a doc under
// another revision.
//
// Requests are classified as their path reads; a request that may read
// as another one to the server behind (empty or dot segments, a trailing
// slash, an escaped slash, a ';' in a segment, a method not in capitals)
// is refused with 400 when any of its readings names a subscribed db.
// See EscapedPaths.
type Middleware struct {
	// Host is the plugin host.
	Host *Host
	// Next is the server's own handler.
	Next http.Handler
	// User returns the authenticated user of a request as the server sees
	// it (nil: every request is anonymous).
	User func(r *http.Request) hooks.UserCtx
	// Written returns the after_doc_write event of a doc the server has
	// just written (rev is what it answered): the doc's winning revision,
	// its db's uuid and the write's sequence. nil: no after_doc_write.
	Written func(ctx context.Context, db, docID, rev string) (hooks.DocWrite, error)
	// DBCreated and DBDeleted return the uuid of a db the server has just
	// created or deleted. nil: no after_db_create / after_db_delete.
	DBCreated, DBDeleted func(db string) (uuid string)
	// EscapedPaths says the server finds a request's db and doc in its
	// escaped path (r.URL.EscapedPath, or RawPath: chi does, as CouchDB),
	// so that %2F is part of a name (the db a/_replicator is
	// /a%2F_replicator). Without it, a request to a subscribed db whose
	// path holds an escaped slash is refused (400), since a server that
	// splits r.URL.Path would read it as another request.
	EscapedPaths bool
	// MaxDocSize bounds a doc body read for before_doc_update; 0 means
	// 64 MiB. A larger body is refused with 413.
	MaxDocSize int64
}

// errNotValidated is the answer to writes the middleware cannot pass
// through before_doc_update.
func errNotValidated(what, db string) *hooks.Error {
	return &hooks.Error{Status: http.StatusNotImplemented, Err: "not_implemented",
		Reason: what + " to " + db + " is not supported here: its docs must pass the plugins' before_doc_update one by one"}
}

func (m *Middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if m.Host.HasRoute(r.Method, path) {
		m.Host.ServeHTTP(w, r.WithContext(WithUser(r.Context(), m.user(r))))
		return
	}
	if path == "/_active_tasks" && r.Method == http.MethodGet {
		m.activeTasks(w, r)
		return
	}
	segs, plain, herr := m.segments(r)
	if herr != nil {
		hooks.WriteError(w, herr)
		return
	}
	if !plain || len(segs) == 0 || strings.HasPrefix(segs[0], "_") && !isSystemDB(segs[0]) {
		m.Next.ServeHTTP(w, r)
		return
	}
	db := segs[0]
	if changesDocs(r.Method, segs) && m.Host.Subscribed(hooks.DBUpdated, db) {
		rec := &capture{ResponseWriter: w}
		w = rec
		defer func() {
			if rec.status/100 == 2 {
				m.Host.DBUpdated(db, "")
			}
		}()
	}
	switch {
	case len(segs) == 1 && (r.Method == http.MethodPut || r.Method == http.MethodDelete):
		m.dbWrite(w, r, db)
	case len(segs) == 1 && r.Method == http.MethodPost:
		m.docWrite(w, r, db, "")
	case len(segs) == 2 && segs[1] == "_bulk_docs" && r.Method == http.MethodPost && m.validated(db):
		hooks.WriteError(w, errNotValidated("_bulk_docs", db))
	case len(segs) >= 2 && (segs[1] == "_local" || segs[1] == "_local_docs"):
		m.Next.ServeHTTP(w, r)
	case designFunction(segs) && m.validated(db):
		hooks.WriteError(w, errNotValidated("a design doc function ("+segs[3]+")", db))
	case m.readFiltered(db) && !m.user(r).IsAdmin() && !nonAdminMay(r, segs):
		hooks.WriteError(w, hooks.Forbidden("Only admins may read "+db+" this way; read its docs one by one."))
	case len(segs) == 2 && !strings.HasPrefix(segs[1], "_") || len(segs) == 3 && segs[1] == "_design":
		id := strings.Join(segs[1:], "/")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			m.docRead(w, r, db)
		case http.MethodPut, http.MethodDelete:
			m.docWrite(w, r, db, id)
		case "COPY":
			if m.validated(db) {
				hooks.WriteError(w, errNotValidated("COPY", db))
				return
			}
			m.Next.ServeHTTP(w, r)
		default:
			if m.validated(db) { // POST /{db}/{docid} (a form upload of attachments)
				hooks.WriteError(w, errNotValidated(r.Method+" to a doc", db))
				return
			}
			m.Next.ServeHTTP(w, r)
		}
	case len(segs) >= 3 && r.Method != http.MethodGet && r.Method != http.MethodHead && !strings.HasPrefix(segs[1], "_") && m.validated(db),
		len(segs) >= 3 && (r.Method == http.MethodPut || r.Method == http.MethodDelete) && m.validated(db):
		hooks.WriteError(w, errNotValidated("an attachment write", db))
	case len(segs) >= 3 && m.readFiltered(db) && !m.user(r).IsAdmin():
		// An attachment: its ETag may be the doc's stored revision.
		m.Next.ServeHTTP(&noETag{ResponseWriter: w}, r)
	default:
		m.Next.ServeHTTP(w, r)
	}
}

// changesDocs reports whether a request to a db path (segs) may change
// the db's documents, and so its update sequence: doc and attachment
// writes, POST /{db}, _bulk_docs and _purge. _local docs do not move the
// update sequence.
func changesDocs(method string, segs []string) bool {
	switch {
	case len(segs) == 1:
		return method == http.MethodPost
	case strings.HasPrefix(segs[1], "_local"):
		return false
	case len(segs) == 2 && (segs[1] == "_bulk_docs" || segs[1] == "_purge"):
		return method == http.MethodPost
	case strings.HasPrefix(segs[1], "_") && segs[1] != "_design":
		return false
	}
	return method == http.MethodPut || method == http.MethodDelete || method == "COPY"
}

func (m *Middleware) user(r *http.Request) hooks.UserCtx {
	if m.User == nil {
		return hooks.UserCtx{}
	}
	return m.User(r)
}

// readFiltered reports whether docs read from db must pass after_doc_read.
func (m *Middleware) readFiltered(db string) bool {
	return m.Host.Subscribed(hooks.AfterDocRead, db)
}

// docRead answers a single-doc GET or HEAD, through after_doc_read when db
// is subscribed to it (a HEAD is answered with the headers of the GET, so
// its ETag never names a revision the GET would not show).
func (m *Middleware) docRead(w http.ResponseWriter, r *http.Request, db string) {
	if !m.readFiltered(db) {
		m.Next.ServeHTTP(w, r)
		return
	}
	rec := &buffered{header: http.Header{}}
	if r.Method == http.MethodHead {
		r = r.Clone(r.Context())
		r.Method = http.MethodGet
	}
	m.Next.ServeHTTP(rec, r)
	body := rec.body.Bytes()
	if rec.status == http.StatusOK {
		if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
			hooks.WriteError(w, hooks.Forbidden("Only admins may read docs of "+db+" this way; read them one by one."))
			return
		}
		out, err := m.Host.AfterDocRead(r.Context(), db, body, m.user(r))
		if err != nil {
			hooks.WriteError(w, err)
			return
		}
		if !bytes.Equal(out, body) {
			// The plugin changed what the reader sees: so does the ETag.
			rec.header.Del("ETag")
			if rev := docRev(out); rev != "" {
				rec.header.Set("ETag", `"`+rev+`"`)
			}
		}
		body = out
		rec.header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	w.Write(body)
}

// validated reports whether writes to db must pass before_doc_update.
func (m *Middleware) validated(db string) bool {
	return db != "" && m.Host.Subscribed(hooks.BeforeDocUpdate, db)
}

// dbWrite passes a db creation or deletion on and reports its success.
func (m *Middleware) dbWrite(w http.ResponseWriter, r *http.Request, db string) {
	rec := &capture{ResponseWriter: w}
	m.Next.ServeHTTP(rec, r)
	if rec.status/100 != 2 {
		return
	}
	if r.Method == http.MethodPut && m.DBCreated != nil {
		m.Host.AfterDBCreate(db, m.DBCreated(db))
	}
	if r.Method == http.MethodDelete && m.DBDeleted != nil {
		m.Host.AfterDBDelete(db, m.DBDeleted(db))
	}
}

// docWrite runs one doc write (id "" for POST /{db}) through the hooks.
func (m *Middleware) docWrite(w http.ResponseWriter, r *http.Request, db, id string) {
	validate := m.validated(db)
	notify := m.Written != nil && m.Host.Subscribed(hooks.AfterDocWrite, db)
	if !validate && !notify {
		m.Next.ServeHTTP(w, r)
		return
	}
	if validate {
		doc, herr := m.docOf(r, id)
		if herr != nil {
			hooks.WriteError(w, herr)
			return
		}
		out, err := m.Host.BeforeDocUpdate(r.Context(), db, doc, m.user(r))
		if err != nil {
			hooks.WriteError(w, err)
			return
		}
		if r.Method != http.MethodDelete {
			r.Body = io.NopCloser(bytes.NewReader(out))
			r.ContentLength = int64(len(out))
			r.Header.Set("Content-Length", strconv.Itoa(len(out)))
		}
	}
	rec := &capture{ResponseWriter: w, keep: true}
	m.Next.ServeHTTP(rec, r)
	if !notify || rec.status/100 != 2 {
		return
	}
	var res struct{ ID, Rev string }
	if json.Unmarshal(rec.body.Bytes(), &res) != nil || res.ID == "" {
		m.Host.log.Warn("after_doc_write: the server's answer names no doc", "db", db, "status", rec.status)
		return
	}
	ev, err := m.Written(r.Context(), db, res.ID, res.Rev)
	if err != nil {
		m.Host.log.Warn("after_doc_write: cannot read the written doc", "db", db, "id", res.ID, "error", err)
		return
	}
	m.Host.AfterDocWrite(ev)
}

// docOf returns the doc a write hands to before_doc_update: the body with
// _id set from the URL (and _rev from ?rev= or If-Match when the body has
// none), or for a DELETE {"_id","_rev","_deleted":true}.
func (m *Middleware) docOf(r *http.Request, id string) ([]byte, *hooks.Error) {
	if r.Method == http.MethodDelete {
		rev := r.URL.Query().Get("rev")
		if rev == "" {
			rev = strings.Trim(r.Header.Get("If-Match"), `"`)
		}
		b, _ := json.Marshal(map[string]any{"_id": id, "_rev": rev, "_deleted": true})
		return b, nil
	}
	max := m.MaxDocSize
	if max <= 0 {
		max = 64 << 20
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, &hooks.Error{Status: 400, Err: "bad_request", Reason: "could not read the request body"}
	}
	if int64(len(b)) > max {
		return nil, &hooks.Error{Status: 413, Err: "too_large", Reason: "the request entity is too large"}
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(b, &doc) != nil || doc == nil {
		reason := "invalid UTF-8 JSON"
		if errors.Is(jsonobj.Invalid(b), jsonobj.ErrTooDeep) {
			reason = jsonobj.ErrTooDeep.Error()
		}
		return nil, &hooks.Error{Status: 400, Err: "bad_request", Reason: reason}
	}
	if id == "" {
		return b, nil
	}
	doc["_id"], _ = json.Marshal(id)
	if _, ok := doc["_rev"]; !ok {
		// The revision a PUT names outside its body: the hook sees the
		// doc as CouchDB's does (couch_doc_from_req), an update, not a
		// create.
		rev := r.URL.Query().Get("rev")
		if rev == "" {
			rev = strings.Trim(r.Header.Get("If-Match"), `"`)
		}
		if rev != "" {
			doc["_rev"], _ = json.Marshal(rev)
		}
	}
	b, _ = json.Marshal(doc)
	return b, nil
}

// activeTasks answers GET /_active_tasks with the server's tasks and the
// plugins'.
func (m *Middleware) activeTasks(w http.ResponseWriter, r *http.Request) {
	rec := &buffered{header: http.Header{}}
	m.Next.ServeHTTP(rec, r)
	if rec.status != http.StatusOK {
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		w.Write(rec.body.Bytes())
		return
	}
	var tasks []json.RawMessage
	if err := json.Unmarshal(rec.body.Bytes(), &tasks); err != nil {
		// The server's own list is not a JSON array: the plugins' tasks are still worth showing.
		m.Host.log.Warn("the server's _active_tasks answer is not a JSON array; showing the plugins' tasks only", "error", err)
		tasks = nil
	}
	tasks = append(tasks, m.Host.ActiveTasks(r.Context())...)
	if tasks == nil {
		tasks = []json.RawMessage{}
	}
	hooks.WriteJSON(w, http.StatusOK, tasks)
}

// capture passes a response through while noting its status and, when
// keep, the first MiB of its body.
type capture struct {
	http.ResponseWriter
	keep   bool
	status int
	body   bytes.Buffer
}

func (c *capture) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.keep && c.body.Len() < 1<<20 {
		c.body.Write(b)
	}
	return c.ResponseWriter.Write(b)
}

// Flush lets streamed answers (changes feeds) through as they come.
func (c *capture) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// buffered is a ResponseWriter that keeps a whole response.
type buffered struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *buffered) Header() http.Header { return b.header }

func (b *buffered) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *buffered) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// splitEscaped splits an escaped path into unescaped segments ("" → none).
func splitEscaped(path string) []string {
	path = strings.Trim(path, "/")
	if path == "" {
		return nil
	}
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if u, err := url.PathUnescape(p); err == nil {
			parts[i] = u
		}
	}
	// A db name may contain an escaped slash (a/_replicator is
	// /a%2F_replicator): unescaping keeps it one segment.
	return parts
}

// isSystemDB reports whether name is one of CouchDB's system dbs, which
// start with an underscore but are dbs.
func isSystemDB(name string) bool {
	return name == "_users" || name == "_replicator" || name == "_global_changes" ||
		strings.HasSuffix(name, "/_replicator") || strings.HasSuffix(name, "/_users")
}

var _ http.Handler = (*Middleware)(nil)
