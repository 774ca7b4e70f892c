package couchapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// Version is the CouchDB version minicouch reports.
const Version = "3.5.0"

// Vendor is minicouch's vendor name in `GET /`.
const Vendor = "couchepi minicouch"

// NodeName is the default node name, as a CouchDB started without -name.
const NodeName = "nonode@nohost"

// serveServer dispatches the top-level `/_…` endpoints.
func (s *Server) serveServer(q *request) {
	switch q.segs[0] {
	case "_up":
		s.only(q, "GET,HEAD", func() { writeRawJSON(q.w, 200, []byte(`{"status":"ok","seeds":{}}`)) })
	case "_all_dbs":
		s.only(q, "GET,HEAD", func() { s.handleAllDBs(q) })
	case "_dbs_info":
		if err := auth.CheckServerAdmin(q.user); err != nil {
			writeError(q.w, err)
			return
		}
		s.dbsInfo(q)
	case "_uuids":
		s.only(q, "GET,HEAD", func() { s.handleUUIDs(q) })
	case "_membership":
		s.only(q, "GET,HEAD", func() {
			writeRawJSON(q.w, 200, []byte(`{"all_nodes":["`+s.node+`"],"cluster_nodes":["`+s.node+`"]}`))
		})
	case "_db_updates":
		s.only(q, "GET,HEAD,POST", func() { s.handleDBUpdates(q) })
	case "_stats":
		s.only(q, "GET,HEAD", func() { s.handleStats(q, q.segs[1:]) })
	case "_active_tasks":
		s.only(q, "GET,HEAD", func() { s.handleActiveTasks(q) })
	case "_session":
		s.handleSession(q)
	case "_node":
		s.handleNode(q)
	case "_utils":
		s.handleUtils(q)
	case "_replicate", "_scheduler":
		writeError(q.w, &hooks.Error{Status: 404, Err: "not_found", Reason: "no plugin serves " + q.segs[0]})
	default:
		s.serveUnknownSystemName(q)
	}
}

// serveUnknownSystemName answers `/_name` paths nothing serves as CouchDB
// does: such paths are for server admins only (401 first), a PUT would
// create a db with an illegal name (400), and anything else names a db
// that does not exist (404).
func (s *Server) serveUnknownSystemName(q *request) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	if q.r.Method == "PUT" && len(q.segs) == 1 {
		writeError(q.w, illegalDBName(q.segs[0]))
		return
	}
	writeError(q.w, errDBMissing)
}

// only runs fn when the request method is among allowed (comma-separated),
// else answers CouchDB's 405.
func (s *Server) only(q *request, allowed string, fn func()) {
	for _, m := range strings.Split(allowed, ",") {
		if q.r.Method == m {
			fn()
			return
		}
	}
	writeError(q.w, methodNotAllowed(allowed))
}

func (s *Server) handleWelcome(q *request) {
	if q.r.Method != "GET" && q.r.Method != "HEAD" {
		writeError(q.w, methodNotAllowed("GET,HEAD"))
		return
	}
	uuid, _ := s.cfg.Get("couchdb", "uuid")
	writeJSON(q.w, 200, struct {
		CouchDB  string            `json:"couchdb"`
		Version  string            `json:"version"`
		GitSHA   string            `json:"git_sha"`
		UUID     string            `json:"uuid"`
		Features []string          `json:"features"`
		Vendor   map[string]string `json:"vendor"`
	}{"Welcome", Version, "minicouch", uuid, []string{"access-ready", "scheduler"}, map[string]string{"name": Vendor}})
}

func (s *Server) handleAllDBs(q *request) {
	if s.cfg.GetDefault("chttpd", "admin_only_all_dbs", "true") != "false" {
		if err := auth.CheckServerAdmin(q.user); err != nil {
			writeError(q.w, err)
			return
		}
	}
	names, err := s.store.ListDBs()
	if err != nil {
		writeError(q.w, err)
		return
	}
	sort.Strings(names)
	opts, herr := parseAllDocsQuery(q.r.URL.Query())
	if herr != nil {
		writeError(q.w, herr)
		return
	}
	out := rangeStrings(names, opts)
	b, _ := jsonobj.Marshal(out)
	if notModified(q.w, q.r, etagOf(string(b))) {
		return
	}
	writeRawJSON(q.w, 200, b)
}

// rangeStrings applies startkey/endkey/descending/skip/limit to sorted names.
func rangeStrings(names []string, o allDocsQuery) []string {
	if o.Descending {
		for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
			names[i], names[j] = names[j], names[i]
		}
	}
	out := []string{}
	for _, n := range names {
		if o.StartKey != nil {
			if (!o.Descending && n < *o.StartKey) || (o.Descending && n > *o.StartKey) {
				continue
			}
		}
		if o.EndKey != nil {
			if (!o.Descending && (n > *o.EndKey || (!o.InclusiveEnd && n == *o.EndKey))) ||
				(o.Descending && (n < *o.EndKey || (!o.InclusiveEnd && n == *o.EndKey))) {
				continue
			}
		}
		out = append(out, n)
	}
	if o.Skip > 0 {
		if o.Skip >= len(out) {
			out = []string{}
		} else {
			out = out[o.Skip:]
		}
	}
	if o.Limit >= 0 && o.Limit < len(out) {
		out = out[:o.Limit]
	}
	return out
}

func (s *Server) handleUUIDs(q *request) {
	count := 1
	if c := q.query("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			writeError(q.w, badRequest("Invalid count parameter"))
			return
		}
		count = n
	}
	if count > int(s.cfg.Int("uuids", "max_count", 1000)) {
		writeError(q.w, badRequest("count parameter too large"))
		return
	}
	ids := make([]string, count)
	for i := range ids {
		ids[i] = auth.NewSalt()
	}
	b, _ := jsonobj.Marshal(map[string][]string{"uuids": ids})
	// CouchDB's cache-busting headers: uuids must never come from a cache.
	h := q.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache")
	h.Set("Expires", "Mon, 01 Jan 1990 00:00:00 GMT")
	h.Set("Pragma", "no-cache")
	h.Set("ETag", etagOf(string(b)))
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	q.w.WriteHeader(200)
	q.w.Write(append(b, '\n'))
}

func (s *Server) handleActiveTasks(q *request) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	buf := []byte{'['}
	if s.hooks != nil {
		var task bytes.Buffer
		for _, t := range s.hooks.ActiveTasks(q.ctx()) {
			// The plugin's JSON as it sent it, compacted (no re-encoding,
			// so "<0.1002.0>" stays as it is).
			task.Reset()
			if json.Compact(&task, t) != nil {
				continue
			}
			if len(buf) > 1 {
				buf = append(buf, ',')
			}
			buf = append(buf, task.Bytes()...)
		}
	}
	writeRawJSON(q.w, 200, append(buf, ']'))
}

// handleUtils serves Fauxton's static files from --fauxton DIR.
func (s *Server) handleUtils(q *request) {
	if s.fauxton == "" {
		writeError(q.w, &hooks.Error{Status: 404, Err: "not_found", Reason: "Fauxton is not installed (start minicouch with --fauxton DIR)"})
		return
	}
	if q.raw == "/_utils" {
		http.Redirect(q.w, q.r, "/_utils/", http.StatusMovedPermanently)
		return
	}
	http.StripPrefix("/_utils", http.FileServer(http.Dir(s.fauxton))).ServeHTTP(q.w, q.r)
}

// handleSession is `/_session`: GET the current user, POST to log in
// (JSON or form, the name as `name` or `username`), DELETE to log out.
// As CouchDB, POST and DELETE redirect to `next` (a failed login to
// `fail`) when the query names one.
func (s *Server) handleSession(q *request) {
	switch q.r.Method {
	case "GET", "HEAD":
		if q.user.Name == "" && q.query("basic") == "true" {
			writeError(q.w, &hooks.Error{Status: 401, Err: "unauthorized", Reason: "Please login."})
			return
		}
		// CouchDB 3.5 names no authentication_db here.
		info := map[string]any{"authentication_handlers": []string{"cookie", "default"}}
		if q.user.Name != "" {
			if q.r.Header.Get("Authorization") != "" {
				info["authenticated"] = "default"
			} else {
				info["authenticated"] = "cookie"
			}
		}
		writeJSON(q.w, 200, map[string]any{"ok": true, "userCtx": q.user, "info": info})
	case "POST":
		form, herr := readLoginForm(q.r)
		if herr != nil {
			writeError(q.w, herr)
			return
		}
		name, herr := loginName(form)
		if herr != nil {
			writeError(q.w, herr)
			return
		}
		password, _ := form.value("password")
		u, lerr := s.auth.Login(q.ctx(), name, password, auth.Peer(q.r))
		if lerr != nil {
			if lerr.Status != 401 {
				writeError(q.w, lerr)
				return
			}
			q.w.Header().Add("Set-Cookie", s.auth.SetCookieHeader(q.r, "", time.Now()))
			writeJSON(q.w, s.redirectSession(q, "fail", lerr.Status), lerr)
			return
		}
		if ck, ok := s.auth.Cookie(q.ctx(), name); ok {
			q.w.Header().Add("Set-Cookie", s.auth.SetCookieHeader(q.r, ck, time.Now()))
		}
		roles := u.Roles
		if roles == nil {
			roles = []string{}
		}
		s.log.Debug("session created", "user", name)
		writeJSON(q.w, s.redirectSession(q, "next", http.StatusOK), map[string]any{"ok": true, "name": name, "roles": roles})
	case "DELETE":
		q.w.Header().Add("Set-Cookie", s.auth.SetCookieHeader(q.r, "", time.Now()))
		writeJSON(q.w, s.redirectSession(q, "next", http.StatusOK), okJSON)
	default:
		writeError(q.w, methodNotAllowed("GET,HEAD,POST,DELETE"))
	}
}
