package couchapi

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
)

// defaultSecurity is CouchDB 3's admin_only security object of a new db.
var defaultSecurity = []byte(`{"members":{"roles":["_admin"]},"admins":{"roles":["_admin"]}}`)

// dbReq is a request addressed to one database.
type dbReq struct {
	*request
	name string
	db   *store.DB
	sec  auth.Security
}

// serveDB dispatches `/{db}` and everything below it.
func (s *Server) serveDB(q *request) {
	name := q.segs[0]
	if !validDBName(name) {
		writeError(q.w, illegalDBName(name))
		return
	}
	if len(q.segs) == 1 {
		switch q.r.Method {
		case "PUT":
			s.createDB(q, name)
			return
		case "DELETE":
			s.deleteDB(q, name)
			return
		}
	}
	db, err := s.store.DB(name)
	if err != nil {
		writeError(q.w, errDBMissing)
		return
	}
	raw, err := db.Security(q.ctx())
	if err != nil {
		writeError(q.w, err)
		return
	}
	d := &dbReq{request: q, name: name, db: db, sec: auth.ParseSecurity(raw)}
	usersDoc := isUsersDB(name) && len(q.segs) >= 2 && !strings.HasPrefix(q.segs[1], "_")
	if !usersDoc {
		if err := d.sec.CheckMember(q.user); err != nil {
			writeError(q.w, err)
			return
		}
	}
	if len(q.segs) == 1 {
		switch q.r.Method {
		case "GET", "HEAD":
			s.dbInfo(d)
		case "POST":
			s.postDoc(d)
		default:
			writeError(q.w, methodNotAllowed("DELETE,GET,HEAD,POST,PUT"))
		}
		return
	}
	sys := isUsersDB(name) || isReplicatorDB(name)
	switch q.segs[1] {
	case "_all_docs", "_changes", "_design_docs", "_local_docs":
		if sys {
			if err := auth.CheckServerAdmin(q.user); err != nil {
				writeError(q.w, err)
				return
			}
		}
	}
	switch q.segs[1] {
	case "_all_docs":
		s.only(q, "GET,HEAD,POST", func() { s.allDocs(d, "all") })
	case "_design_docs":
		s.only(q, "GET,HEAD,POST", func() { s.allDocs(d, "design") })
	case "_local_docs":
		s.only(q, "GET,HEAD,POST", func() { s.allDocs(d, "local") })
	case "_bulk_docs":
		s.only(q, "POST", func() { s.bulkDocs(d) })
	case "_find":
		s.only(q, "POST", func() { s.find(d) })
	case "_index":
		s.indexes(d)
	case "_explain":
		s.only(q, "POST", func() { s.explain(d) })
	case "_bulk_get":
		s.only(q, "POST", func() { s.bulkGet(d) })
	case "_revs_diff":
		s.only(q, "POST", func() { s.revsDiff(d) })
	case "_missing_revs":
		s.only(q, "POST", func() { s.missingRevs(d) })
	case "_changes":
		s.only(q, "GET,HEAD,POST", func() { s.changes(d) })
	case "_security":
		s.security(d)
	case "_revs_limit":
		s.revsLimit(d)
	case "_compact", "_view_cleanup":
		s.only(q, "POST", func() { s.compact(d) })
	case "_ensure_full_commit":
		s.only(q, "POST", func() {
			writeRawJSON(q.w, 201, []byte(`{"ok":true,"instance_start_time":"0"}`))
		})
	case "_design":
		if len(q.segs) < 3 {
			writeError(q.w, errMissing)
			return
		}
		if len(q.segs) == 5 && q.segs[3] == "_view" {
			if s.readHooked(name) && !q.user.IsAdmin() {
				// A view's rows are what its map function emits from the
				// stored docs: nothing in them passes after_doc_read.
				writeError(q.w, hooks.Forbidden("Only admins may query the views of "+name+"."))
				return
			}
			s.view(d, q.segs[2], q.segs[4])
			return
		}
		if len(q.segs) == 4 && q.segs[3] == "_info" {
			s.only(q, "GET,HEAD", func() { s.designInfo(d, q.segs[2]) })
			return
		}
		s.serveDoc(d, store.DesignPrefix+q.segs[2], q.segs[3:])
	case "_local":
		if len(q.segs) < 3 {
			writeError(q.w, errMissing)
			return
		}
		if len(q.segs) > 3 {
			writeError(q.w, badRequest("_local documents do not accept attachments."))
			return
		}
		s.serveDoc(d, store.LocalPrefix+q.segs[2], nil)
	default:
		if strings.HasPrefix(q.segs[1], "_") && !strings.HasPrefix(q.segs[1], store.DesignPrefix) &&
			!strings.HasPrefix(q.segs[1], store.LocalPrefix) {
			writeError(q.w, errUnderscoreID)
			return
		}
		s.serveDoc(d, q.segs[1], q.segs[2:])
	}
}

func (s *Server) createDB(q *request, name string) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	// minicouch has no partitioned databases: refuse as CouchDB does with
	// the feature disabled, rather than make an ordinary db (see README).
	switch q.query("partitioned") {
	case "", "false":
	case "true":
		writeError(q.w, badRequest("Partitioned feature is not enabled."))
		return
	default:
		writeError(q.w, badRequest("Invalid `partitioned` parameter"))
		return
	}
	db, err := s.store.CreateDB(name)
	if err != nil {
		writeError(q.w, err)
		return
	}
	if err := db.SetSecurity(q.ctx(), defaultSecurity); err != nil {
		writeError(q.w, err)
		return
	}
	s.log.Info("database created", "db", name)
	if s.hooks != nil {
		s.hooks.AfterDBCreate(name, db.UUID())
	}
	q.w.Header().Set("Location", absURL(q.r, "/"+couchURLEncode(name)))
	writeJSON(q.w, 201, okJSON)
}

func (s *Server) deleteDB(q *request, name string) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	if q.query("rev") != "" {
		writeError(q.w, badRequest("You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?"))
		return
	}
	db, err := s.store.DB(name)
	if err != nil {
		writeError(q.w, errDBMissing)
		return
	}
	uuid := db.UUID()
	if err := s.store.DeleteDB(name); err != nil {
		writeError(q.w, err)
		return
	}
	s.log.Info("database deleted", "db", name)
	if s.hooks != nil {
		s.hooks.AfterDBDelete(name, uuid)
	}
	writeJSON(q.w, 200, okJSON)
}

// dbInfoJSON is GET /{db} in CouchDB 3's field order.
type dbInfoJSON struct {
	InstanceStartTime string      `json:"instance_start_time"`
	DBName            string      `json:"db_name"`
	PurgeSeq          string      `json:"purge_seq"`
	UpdateSeq         string      `json:"update_seq"`
	Sizes             store.Sizes `json:"sizes"`
	Props             struct{}    `json:"props"`
	DocDelCount       uint64      `json:"doc_del_count"`
	DocCount          uint64      `json:"doc_count"`
	DiskFormatVersion int         `json:"disk_format_version"`
	CompactRunning    bool        `json:"compact_running"`
	Cluster           struct {
		Q int `json:"q"`
		N int `json:"n"`
		W int `json:"w"`
		R int `json:"r"`
	} `json:"cluster"`
}

func (s *Server) dbInfo(d *dbReq) {
	info, err := d.db.Info(d.ctx())
	if err != nil {
		writeError(d.w, err)
		return
	}
	writeJSON(d.w, 200, s.newDBInfoJSON(d.name, info))
}

// newDBInfoJSON renders store db info as CouchDB 3 does.
func (s *Server) newDBInfoJSON(name string, info store.DBInfo) dbInfoJSON {
	out := dbInfoJSON{
		InstanceStartTime: "0", DBName: name,
		PurgeSeq:  s.seqs.format(info.PurgeSeq, info.UUID),
		UpdateSeq: s.seqs.format(info.UpdateSeq, info.UUID),
		Sizes:     info.Sizes, DocDelCount: info.DocDelCount, DocCount: info.DocCount,
		DiskFormatVersion: 8,
	}
	out.Cluster.Q, out.Cluster.N, out.Cluster.W, out.Cluster.R = 1, 1, 1, 1
	return out
}

func (s *Server) security(d *dbReq) {
	switch d.r.Method {
	case "GET", "HEAD":
		raw, err := d.db.Security(d.ctx())
		if err != nil {
			writeError(d.w, err)
			return
		}
		if len(raw) == 0 {
			raw = []byte("{}")
		}
		writeRawJSON(d.w, 200, raw)
	case "PUT":
		if err := d.sec.CheckDBAdmin(d.user); err != nil {
			writeError(d.w, err)
			return
		}
		b, herr := readBody(d.r)
		if herr != nil {
			writeError(d.w, herr)
			return
		}
		var obj map[string]json.RawMessage
		if herr := decodeJSON(b, &obj); herr != nil {
			writeError(d.w, herr)
			return
		}
		if obj == nil {
			writeError(d.w, badRequest("Security object must be a JSON object"))
			return
		}
		for _, k := range []string{"admins", "members"} {
			if v, ok := obj[k]; ok {
				var g auth.Group
				if json.Unmarshal(v, &g) != nil {
					writeError(d.w, badRequest(k+" must be a JSON object with names and roles arrays of strings"))
					return
				}
			}
		}
		if err := d.db.SetSecurity(d.ctx(), b); err != nil {
			writeError(d.w, err)
			return
		}
		writeJSON(d.w, 200, okJSON)
	default:
		writeError(d.w, methodNotAllowed("GET,HEAD,PUT"))
	}
}

func (s *Server) revsLimit(d *dbReq) {
	switch d.r.Method {
	case "GET", "HEAD":
		writeRawJSON(d.w, 200, []byte(strconv.Itoa(d.db.RevsLimit())))
	case "PUT":
		if err := d.sec.CheckDBAdmin(d.user); err != nil {
			writeError(d.w, err)
			return
		}
		var n any
		if herr := readJSONBody(d.r, &n); herr != nil {
			writeError(d.w, herr)
			return
		}
		f, ok := n.(float64)
		if !ok || f < 1 || f != float64(int(f)) {
			writeError(d.w, badRequest("`revs_limit` must be a positive integer"))
			return
		}
		if err := d.db.SetRevsLimit(d.ctx(), int(f)); err != nil {
			writeError(d.w, err)
			return
		}
		writeJSON(d.w, 200, okJSON)
	default:
		writeError(d.w, methodNotAllowed("GET,HEAD,PUT"))
	}
}

func (s *Server) compact(d *dbReq) {
	if err := d.sec.CheckDBAdmin(d.user); err != nil {
		writeError(d.w, err)
		return
	}
	if err := requireJSONType(d.r); err != nil {
		writeError(d.w, err)
		return
	}
	if d.segs[1] == "_compact" {
		if err := d.db.Compact(d.ctx()); err != nil && !errors.Is(err, store.ErrDBNotFound) {
			s.log.Warn("compaction failed", "db", d.name, "error", err)
		}
	}
	writeJSON(d.w, 202, okJSON)
}

// designInfo serves GET /{db}/_design/{ddoc}/_info. minicouch computes
// views at query time, so the index is always current and empty on disk.
func (s *Server) designInfo(d *dbReq, ddoc string) {
	doc, err := d.db.Get(d.ctx(), store.DesignPrefix+ddoc, store.GetOptions{})
	if err != nil {
		writeError(d.w, err)
		return
	}
	sig := md5.Sum([]byte(doc.Rev))
	writeJSON(d.w, 200, map[string]any{"name": ddoc, "view_index": map[string]any{
		"updates_pending": map[string]int{"minimum": 0, "preferred": 0, "total": 0},
		"waiting_commit":  false, "waiting_clients": 0, "updater_running": false,
		"update_seq": d.db.UpdateSeq(), "sizes": map[string]int{"file": 0, "external": 0, "active": 0},
		"signature": hex.EncodeToString(sig[:]), "purge_seq": 0, "language": "javascript", "compact_running": false,
	}})
}
