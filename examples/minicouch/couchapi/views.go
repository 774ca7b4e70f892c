package couchapi

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strconv"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/examples/minicouch/views"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// viewQuery is a view request's parameters: the engine's query and what
// the HTTP answer adds to its rows.
type viewQuery struct {
	views.Query
	conflicts bool // include_docs: each doc's _conflicts
	encInfo   bool // include_docs: att_encoding_info
	updateSeq bool // update_seq=true: say which seq the rows reflect
}

func jsonParam(q url.Values, names ...string) (any, bool, *hooks.Error) {
	for _, n := range names {
		if v := q.Get(n); v != "" {
			var out any
			if err := json.Unmarshal([]byte(v), &out); err != nil {
				return nil, false, &hooks.Error{Status: 400, Err: "bad_request", Reason: "invalid_json"}
			}
			return out, true, nil
		}
	}
	return nil, false, nil
}

// parseViewQuery reads a view request's query string.
func parseViewQuery(q url.Values) (*viewQuery, *hooks.Error) {
	v := &viewQuery{Query: views.Query{InclusiveEnd: q.Get("inclusive_end") != "false", Descending: q.Get("descending") == "true",
		Limit: -1, IncludeDocs: q.Get("include_docs") == "true"}, conflicts: q.Get("conflicts") == "true",
		updateSeq: q.Get("update_seq") == "true", encInfo: q.Get("att_encoding_info") == "true"}
	var herr *hooks.Error
	var key any
	var hasKey bool
	if key, hasKey, herr = jsonParam(q, "key"); herr != nil {
		return nil, herr
	}
	if v.Start, v.HasStart, herr = jsonParam(q, "startkey", "start_key"); herr != nil {
		return nil, herr
	}
	if v.End, v.HasEnd, herr = jsonParam(q, "endkey", "end_key"); herr != nil {
		return nil, herr
	}
	if ks, ok, herr := jsonParam(q, "keys"); herr != nil {
		return nil, herr
	} else if ok {
		list, isList := ks.([]any)
		if !isList {
			return nil, badRequest("`keys` parameter must be an array.")
		}
		v.Keys, v.HasKeys = list, true
	}
	if hasKey {
		v.Keys, v.HasKeys = []any{key}, true
	}
	v.StartDocID = firstOf(q, "startkey_docid", "start_key_doc_id")
	v.EndDocID = firstOf(q, "endkey_docid", "end_key_doc_id")
	for _, p := range []struct {
		name string
		dst  *int
	}{{"skip", &v.Skip}, {"limit", &v.Limit}, {"group_level", &v.GroupLevel}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return nil, &hooks.Error{Status: 400, Err: "query_parse_error", Reason: "Invalid value for integer: \"" + s + "\""}
			}
			*p.dst = n
		}
	}
	if s := q.Get("reduce"); s != "" {
		b := s == "true"
		v.Reduce = &b
	}
	if q.Get("group") == "true" {
		v.Group = true
		if q.Get("group_level") == "" {
			v.GroupLevel = -1
		}
	}
	if q.Get("group_level") != "" {
		v.Group = true
	}
	return v, nil
}

func firstOf(q url.Values, names ...string) string {
	for _, n := range names {
		if v := q.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// view serves GET/POST /{db}/_design/{ddoc}/_view/{name}; the views
// package computes the rows.
func (s *Server) view(d *dbReq, ddoc, name string) {
	if d.r.Method != "GET" && d.r.Method != "HEAD" && d.r.Method != "POST" {
		writeError(d.w, methodNotAllowed("GET,POST,HEAD"))
		return
	}
	vq, herr := parseViewQuery(d.r.URL.Query())
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	if d.r.Method == "POST" {
		var body struct {
			Keys *[]any `json:"keys"`
		}
		if herr := readJSONBody(d.r, &body); herr != nil {
			writeError(d.w, herr)
			return
		}
		if body.Keys != nil {
			vq.Keys, vq.HasKeys = *body.Keys, true
		}
	}
	v, err := views.Open(d.ctx(), d.db, ddoc, name)
	if err != nil {
		writeError(d.w, asCouchError(err))
		return
	}
	res, err := v.Run(d.ctx(), d.db, &vq.Query, s.log.With("db", d.name))
	if err != nil {
		writeError(d.w, err)
		return
	}
	if res.Reduced {
		out := map[string]any{"rows": res.Rows}
		if vq.updateSeq {
			out["update_seq"] = s.seqs.format(res.Seq, d.db.UUID())
		}
		writeJSON(d.w, 200, out)
		return
	}
	selected := res.Rows
	if vq.IncludeDocs {
		for i := range selected {
			id := selected[i].ID
			if m, ok := selected[i].Value.(map[string]any); ok {
				if linked, ok := m["_id"].(string); ok {
					id = linked
				}
			}
			doc, err := d.db.Get(d.ctx(), id, store.GetOptions{Conflicts: vq.conflicts, AttEncodingInfo: vq.encInfo})
			if err != nil {
				selected[i].Doc = nil
				continue
			}
			body, err := s.renderDoc(d, doc, false)
			if err == nil {
				var v any
				_ = json.Unmarshal(body, &v)
				selected[i].Doc = v
			}
		}
	}
	var buf bytes.Buffer
	buf.WriteString(`{"total_rows":` + strconv.Itoa(res.TotalRows) + `,"offset":` + strconv.Itoa(res.Offset))
	if vq.updateSeq {
		buf.WriteString(`,"update_seq":`)
		buf.Write(jsonobj.AppendString(nil, s.seqs.format(res.Seq, d.db.UUID())))
	}
	buf.WriteString(`,"rows":[`)
	for i, r := range selected {
		if i > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\r\n")
		b, _ := jsonobj.Marshal(r)
		if vq.IncludeDocs && r.Doc == nil {
			b = append(b[:len(b)-1], []byte(`,"doc":null}`)...)
		}
		buf.Write(b)
	}
	buf.WriteString("\r\n]}")
	writeRawJSON(d.w, 200, buf.Bytes())
}
