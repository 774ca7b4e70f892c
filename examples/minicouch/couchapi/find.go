package couchapi

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
)

// findRequest is the body of POST /{db}/_find.
type findRequest struct {
	Selector       json.RawMessage `json:"selector"`
	Fields         []string        `json:"fields"`
	Sort           []any           `json:"sort"`
	Limit          *int            `json:"limit"`
	Skip           int             `json:"skip"`
	Conflicts      bool            `json:"conflicts"`
	ExecutionStats bool            `json:"execution_stats"`
	UseIndex       json.RawMessage `json:"use_index"`
}

// readFindRequest reads and checks a _find or _explain body.
func readFindRequest(d *dbReq) (findRequest, mango.Query, *hooks.Error) {
	var req findRequest
	var q mango.Query
	if herr := readJSONRequest(d.r, &req); herr != nil {
		return req, q, herr
	}
	if len(req.Selector) == 0 {
		return req, q, &hooks.Error{Status: 400, Err: "missing_required_key", Reason: "Missing required key: selector"}
	}
	if t := bytes.TrimSpace(req.Selector); len(t) == 0 || t[0] != '{' {
		return req, q, badRequest("Selector error: expected a JSON object")
	}
	sel, err := mango.Parse(req.Selector)
	if err != nil {
		return req, q, &hooks.Error{Status: 400, Err: "invalid_operator", Reason: err.Error()}
	}
	sorts, herr := mango.ParseSort(req.Sort)
	q = mango.Query{Selector: sel, Sort: sorts, Limit: 25, Skip: req.Skip, UseIndex: mango.ParseUseIndex(req.UseIndex)}
	if req.Limit != nil {
		q.Limit = *req.Limit
	}
	return req, q, herr
}

// find serves POST /{db}/_find.
func (s *Server) find(d *dbReq) {
	req, q, herr := readFindRequest(d)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	res, err := s.mango.Find(d.ctx(), d.db, q, func(id string) ([]byte, error) {
		doc, err := d.db.Get(d.ctx(), id, store.GetOptions{Conflicts: req.Conflicts})
		if err != nil {
			return nil, nil // deleted, or gone meanwhile
		}
		return s.renderDoc(d, doc, false)
	})
	if err != nil {
		writeError(d.w, err)
		return
	}
	outDocs := make([]map[string]any, 0, len(res.Docs))
	for _, m := range res.Docs {
		outDocs = append(outDocs, mango.Project(m, req.Fields))
	}
	out := map[string]any{"docs": outDocs, "bookmark": "nil"}
	if res.Warning != "" {
		out["warning"] = res.Warning
	}
	if req.ExecutionStats {
		out["execution_stats"] = map[string]any{"total_keys_examined": res.KeysExamined, "total_docs_examined": res.DocsExamined,
			"total_quorum_docs_examined": 0, "results_returned": len(outDocs), "execution_time_ms": 0}
	}
	writeJSON(d.w, 200, out)
}

// allDocsIndex is the one index minicouch's _find uses: a scan of
// _all_docs (CouchDB's "special" index).
var allDocsIndex = map[string]any{"ddoc": nil, "name": "_all_docs", "type": "special",
	"def": map[string]any{"fields": []any{map[string]string{"_id": "asc"}}}}

// explain serves POST /{db}/_explain: the plan _find follows for the same
// body, as CouchDB shows it. minicouch's plan is always the _all_docs scan.
func (s *Server) explain(d *dbReq) {
	req, q, herr := readFindRequest(d)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	defs, err := mango.ReadIndexDefs(d.ctx(), d.db)
	if err != nil {
		writeError(d.w, err)
		return
	}
	idx, _, err := mango.Plan(defs, q.Selector, q.Sort, q.UseIndex)
	if err != nil {
		writeError(d.w, err)
		return
	}
	var index any = allDocsIndex
	if idx != nil {
		index = idx.JSONView()
	}
	useIndex := q.UseIndex
	useOpt := []any{}
	for _, u := range useIndex {
		useOpt = append(useOpt, u)
	}
	limit := q.Limit
	var fields any = "all_fields"
	if len(req.Fields) > 0 {
		fields = req.Fields
	}
	sortOpt := map[string]any{}
	for _, s := range req.Sort {
		switch x := s.(type) {
		case string:
			sortOpt[x] = "asc"
		case map[string]any:
			for k, v := range x {
				sortOpt[k] = v
			}
		}
	}
	writeJSON(d.w, 200, map[string]any{
		"dbname":      d.name,
		"index":       index,
		"partitioned": false,
		"selector":    json.RawMessage(req.Selector),
		"opts": map[string]any{"use_index": useOpt, "bookmark": "nil", "limit": limit, "skip": req.Skip,
			"sort": sortOpt, "fields": fields, "partition": "", "r": []int{49}, "conflicts": req.Conflicts,
			"stale": false, "update": true, "stable": false, "execution_stats": req.ExecutionStats},
		"limit":  limit,
		"skip":   req.Skip,
		"fields": fields,
		"range":  nil,
	})
}

// indexes serves /{db}/_index: GET lists the _all_docs index and the
// json indexes, POST creates one, DELETE …/{ddoc}/json/{name} removes one.
func (s *Server) indexes(d *dbReq) {
	rest := d.segs[2:]
	if len(rest) == 0 {
		switch d.r.Method {
		case "GET", "HEAD":
			defs, err := mango.ReadIndexDefs(d.ctx(), d.db)
			if err != nil {
				writeError(d.w, err)
				return
			}
			list := []any{allDocsIndex}
			for _, x := range defs {
				list = append(list, x.JSONView())
			}
			writeJSON(d.w, 200, map[string]any{"total_rows": len(list), "indexes": list})
		case "POST":
			s.createIndex(d)
		default:
			writeError(d.w, methodNotAllowed("GET,HEAD,POST"))
		}
		return
	}
	// {ddoc}/json/{name}, where ddoc may be "_design/x".
	if n := len(rest); n >= 3 && rest[n-2] == "json" {
		if d.r.Method != "DELETE" {
			writeError(d.w, methodNotAllowed("DELETE"))
			return
		}
		s.deleteIndex(d, strings.Join(rest[:n-2], "/"), rest[n-1])
		return
	}
	writeError(d.w, hooks.NotFound("missing"))
}

// dbsInfo serves GET /_dbs_info and POST /_dbs_info {"keys":[…]}.
func (s *Server) dbsInfo(q *request) {
	var names []string
	switch q.r.Method {
	case "GET", "HEAD":
		all, err := s.store.ListDBs()
		if err != nil {
			writeError(q.w, err)
			return
		}
		names = all
	case "POST":
		if herr := requireJSONType(q.r); herr != nil {
			writeError(q.w, herr)
			return
		}
		var body struct {
			Keys *[]string `json:"keys"`
		}
		if herr := readJSONBody(q.r, &body); herr != nil {
			writeError(q.w, herr)
			return
		}
		if body.Keys == nil {
			writeError(q.w, badRequest("`keys` member must exist."))
			return
		}
		names = *body.Keys
	default:
		writeError(q.w, methodNotAllowed("GET,HEAD,POST"))
		return
	}
	out := make([]any, 0, len(names))
	for _, n := range names {
		db, err := s.store.DB(n)
		if err != nil {
			out = append(out, dbsInfoError{Key: n, Error: "not_found"})
			continue
		}
		info, err := db.Info(q.ctx())
		if err != nil {
			out = append(out, dbsInfoError{Key: n, Error: "not_found"})
			continue
		}
		out = append(out, dbsInfoRow{Key: n, Info: s.newDBInfoJSON(n, info)})
	}
	writeJSON(q.w, 200, out)
}

// dbsInfoRow and dbsInfoError are the rows of _dbs_info.
type dbsInfoRow struct {
	Key  string     `json:"key"`
	Info dbInfoJSON `json:"info"`
}

type dbsInfoError struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}
