package couchapi

import (
	"bytes"
	"encoding/json"
	"sort"
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

// sortField is one `sort` entry: a field path and its direction.
type sortField struct {
	path []string
	desc bool
}

func parseSort(list []any) ([]sortField, *hooks.Error) {
	var out []sortField
	for _, s := range list {
		switch x := s.(type) {
		case string:
			out = append(out, sortField{path: mango.SplitField(x)})
		case map[string]any:
			if len(x) != 1 {
				return nil, &hooks.Error{Status: 400, Err: "invalid_sort_json", Reason: "Sort must be an array of field names or {field: direction} objects"}
			}
			for k, v := range x {
				dir, _ := v.(string)
				if dir != "asc" && dir != "desc" {
					return nil, &hooks.Error{Status: 400, Err: "invalid_sort_json", Reason: "Sort direction must be asc or desc"}
				}
				out = append(out, sortField{path: mango.SplitField(k), desc: dir == "desc"})
			}
		default:
			return nil, &hooks.Error{Status: 400, Err: "invalid_sort_json", Reason: "Sort must be an array of field names or {field: direction} objects"}
		}
	}
	for _, sf := range out {
		if sf.desc != out[0].desc {
			return nil, errMixedSort
		}
	}
	return out, nil
}

// errMixedSort is CouchDB's answer to a sort, or index fields, in more
// than one direction.
var errMixedSort = &hooks.Error{Status: 400, Err: "unsupported_mixed_sort", Reason: "Sorts currently only support a single direction for all fields."}

// fieldValue is the value at a sort or projection path of a doc.
func fieldValue(doc any, path []string) (any, bool) { return mango.Lookup(doc, path) }

// project keeps only the requested fields of a doc.
func project(doc map[string]any, fields []string) map[string]any {
	if len(fields) == 0 {
		return doc
	}
	out := map[string]any{}
	for _, f := range fields {
		path := mango.SplitField(f)
		v, ok := fieldValue(doc, path)
		if !ok {
			continue
		}
		cur := out
		for _, p := range path[:len(path)-1] {
			next, ok := cur[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[p] = next
			}
			cur = next
		}
		cur[path[len(path)-1]] = v
	}
	return out
}

// readFindRequest reads and checks a _find or _explain body.
func readFindRequest(d *dbReq) (findRequest, *mango.Selector, []sortField, *hooks.Error) {
	var req findRequest
	if herr := readJSONRequest(d.r, &req); herr != nil {
		return req, nil, nil, herr
	}
	if len(req.Selector) == 0 {
		return req, nil, nil, &hooks.Error{Status: 400, Err: "missing_required_key", Reason: "Missing required key: selector"}
	}
	if t := bytes.TrimSpace(req.Selector); len(t) == 0 || t[0] != '{' {
		return req, nil, nil, badRequest("Selector error: expected a JSON object")
	}
	sel, err := mango.Parse(req.Selector)
	if err != nil {
		return req, nil, nil, &hooks.Error{Status: 400, Err: "invalid_operator", Reason: err.Error()}
	}
	sorts, herr := parseSort(req.Sort)
	return req, sel, sorts, herr
}

// find serves POST /{db}/_find: through the json index chooseIndex picks
// (its entries in key order, each doc read and matched against the whole
// selector), or by scanning _all_docs.
func (s *Server) find(d *dbReq) {
	req, sel, sorts, herr := readFindRequest(d)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	defs, err := s.indexDefs(d)
	if err != nil {
		writeError(d.w, err)
		return
	}
	idx, warning := chooseIndex(defs, sel, sorts, useIndexOf(req.UseIndex))
	if idx == nil && len(sorts) > 0 && !sortByIDOnly(sorts) {
		writeError(d.w, errNoIndexForSort)
		return
	}
	limit := 25
	if req.Limit != nil {
		limit = *req.Limit
	}
	var docs []map[string]any
	examined, keys := 0, 0
	// take reads, matches and keeps one doc; false once enough are kept
	// for an unsorted (or index-ordered) answer.
	ordered := idx != nil || len(sorts) == 0
	take := func(id string) (bool, error) {
		doc, err := d.db.Get(d.ctx(), id, store.GetOptions{Conflicts: req.Conflicts})
		if err != nil {
			return true, nil
		}
		body, err := s.renderDoc(d, doc, false)
		if err != nil {
			return false, err
		}
		examined++
		var m map[string]any
		if json.Unmarshal(body, &m) != nil || !sel.Match(m) {
			return true, nil
		}
		docs = append(docs, m)
		return !(ordered && limit >= 0 && len(docs) >= req.Skip+limit), nil
	}
	if idx != nil {
		b, err := s.mango.builtFor(d.db, *idx)
		if err != nil {
			writeError(d.w, err)
			return
		}
		var ids []string
		b.mu.Lock()
		err = s.catchUp(d.ctx(), d, b)
		r, _ := sel.FieldRange(idx.Fields[0])
		b.idx.Scan(r, len(sorts) > 0 && sorts[0].desc, func(id string) bool { ids = append(ids, id); return true })
		b.mu.Unlock()
		if err != nil {
			writeError(d.w, err)
			return
		}
		for _, id := range ids {
			keys++
			more, err := take(id)
			if err != nil {
				writeError(d.w, err)
				return
			}
			if !more {
				break
			}
		}
	} else {
		_, err = d.db.AllDocs(d.ctx(), store.AllDocsOptions{}, func(r store.AllDocsRow) error {
			if strings.HasPrefix(r.ID, store.DesignPrefix) {
				return nil
			}
			more, err := take(r.ID)
			if err == nil && !more {
				return store.ErrStop
			}
			return err
		})
		if err != nil && err != store.ErrStop {
			writeError(d.w, err)
			return
		}
		if len(sorts) > 0 { // by _id only (checked above)
			sort.SliceStable(docs, func(i, j int) bool {
				for _, sf := range sorts {
					a, _ := fieldValue(docs[i], sf.path)
					b, _ := fieldValue(docs[j], sf.path)
					// ids in _all_docs order, CouchDB's order of _id
					if c := mango.CompareRaw(a, b); c != 0 {
						return (c < 0) != sf.desc
					}
				}
				return false
			})
		}
	}
	if req.Skip >= len(docs) {
		docs = nil
	} else {
		docs = docs[req.Skip:]
	}
	if limit >= 0 && limit < len(docs) {
		docs = docs[:limit]
	}
	outDocs := make([]map[string]any, 0, len(docs))
	for _, m := range docs {
		outDocs = append(outDocs, project(m, req.Fields))
	}
	out := map[string]any{"docs": outDocs, "bookmark": "nil"}
	if idx == nil {
		warning = strings.TrimPrefix(warning+"\nNo matching index found, create an index to optimize query time.", "\n")
	}
	if warning != "" {
		out["warning"] = warning
	}
	if req.ExecutionStats {
		out["execution_stats"] = map[string]any{"total_keys_examined": keys, "total_docs_examined": examined,
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
	req, sel, sorts, herr := readFindRequest(d)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	defs, err := s.indexDefs(d)
	if err != nil {
		writeError(d.w, err)
		return
	}
	useIndex := useIndexOf(req.UseIndex)
	var index any = allDocsIndex
	if idx, _ := chooseIndex(defs, sel, sorts, useIndex); idx != nil {
		index = idx.jsonView()
	} else if len(sorts) > 0 && !sortByIDOnly(sorts) {
		writeError(d.w, errNoIndexForSort)
		return
	}
	useOpt := []any{}
	for _, u := range useIndex {
		useOpt = append(useOpt, u)
	}
	limit := 25
	if req.Limit != nil {
		limit = *req.Limit
	}
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
			defs, err := s.indexDefs(d)
			if err != nil {
				writeError(d.w, err)
				return
			}
			list := []any{allDocsIndex}
			for _, x := range defs {
				list = append(list, x.jsonView())
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
