package couchapi

import (
	"bytes"
	"encoding/json"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/jsfilter"
	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// viewRow is one row of a view: emitted key and value of a doc.
type viewRow struct {
	ID    string `json:"id,omitempty"`
	Key   any    `json:"key"`
	Value any    `json:"value"`
	Doc   any    `json:"doc,omitempty"`
}

// viewQuery is the parsed query of a view request.
type viewQuery struct {
	keys                   []any
	hasKeys                bool
	start, end             any
	hasStart, hasEnd       bool
	startDocID, endDocID   string
	inclusiveEnd           bool
	descending             bool
	skip, limit            int
	includeDocs, conflicts bool
	encInfo                bool // att_encoding_info
	updateSeq              bool // update_seq=true: say which seq the rows reflect
	reduce                 *bool
	group                  bool
	groupLevel             int // -1 = exact (group=true), 0 = none
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

func parseViewQuery(q url.Values) (*viewQuery, *hooks.Error) {
	v := &viewQuery{inclusiveEnd: q.Get("inclusive_end") != "false", descending: q.Get("descending") == "true",
		limit: -1, includeDocs: q.Get("include_docs") == "true", conflicts: q.Get("conflicts") == "true",
		updateSeq: q.Get("update_seq") == "true", encInfo: q.Get("att_encoding_info") == "true"}
	var herr *hooks.Error
	var key any
	var hasKey bool
	if key, hasKey, herr = jsonParam(q, "key"); herr != nil {
		return nil, herr
	}
	if v.start, v.hasStart, herr = jsonParam(q, "startkey", "start_key"); herr != nil {
		return nil, herr
	}
	if v.end, v.hasEnd, herr = jsonParam(q, "endkey", "end_key"); herr != nil {
		return nil, herr
	}
	if ks, ok, herr := jsonParam(q, "keys"); herr != nil {
		return nil, herr
	} else if ok {
		list, isList := ks.([]any)
		if !isList {
			return nil, badRequest("`keys` parameter must be an array.")
		}
		v.keys, v.hasKeys = list, true
	}
	if hasKey {
		v.keys, v.hasKeys = []any{key}, true
	}
	v.startDocID = firstOf(q, "startkey_docid", "start_key_doc_id")
	v.endDocID = firstOf(q, "endkey_docid", "end_key_doc_id")
	for _, p := range []struct {
		name string
		dst  *int
	}{{"skip", &v.skip}, {"limit", &v.limit}, {"group_level", &v.groupLevel}} {
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
		v.reduce = &b
	}
	if q.Get("group") == "true" {
		v.group = true
		if q.Get("group_level") == "" {
			v.groupLevel = -1
		}
	}
	if q.Get("group_level") != "" {
		v.group = true
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

// cmpRow orders view rows by key (CouchDB collation), then doc id.
func cmpRow(a, b viewRow) int {
	if c := mango.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// view serves GET/POST /{db}/_design/{ddoc}/_view/{name}, computing the map
// (and reduce) over the db's docs at query time: minicouch keeps no view
// index.
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
			vq.keys, vq.hasKeys = *body.Keys, true
		}
	}
	dd, err := d.db.Get(d.ctx(), store.DesignPrefix+ddoc, store.GetOptions{})
	if err != nil {
		writeError(d.w, asCouchError(err))
		return
	}
	var def struct {
		Views map[string]struct {
			Map    string `json:"map"`
			Reduce string `json:"reduce"`
		} `json:"views"`
	}
	_ = json.Unmarshal(dd.Body, &def)
	vd, ok := def.Views[name]
	if !ok || vd.Map == "" {
		writeError(d.w, &hooks.Error{Status: 404, Err: "not_found", Reason: "missing_named_view"})
		return
	}
	mapper, err := jsfilter.NewMapper(vd.Map)
	if err != nil {
		writeError(d.w, &hooks.Error{Status: 400, Err: "compilation_error", Reason: err.Error()})
		return
	}
	var rows []viewRow
	seq := d.db.UpdateSeq() // the rows reflect at least this seq
	_, err = d.db.AllDocs(d.ctx(), store.AllDocsOptions{}, func(r store.AllDocsRow) error {
		if strings.HasPrefix(r.ID, store.DesignPrefix) {
			return nil
		}
		doc, err := d.db.Get(d.ctx(), r.ID, store.GetOptions{Conflicts: true})
		if err != nil {
			return nil
		}
		b, _ := doc.MarshalJSON()
		emits, err := mapper.Map(b)
		if err != nil {
			s.log.Debug("map function failed on doc", "db", d.name, "id", r.ID, "error", err)
			return nil
		}
		for _, e := range emits {
			rows = append(rows, viewRow{ID: r.ID, Key: e.Key, Value: e.Value})
		}
		return nil
	})
	if err != nil {
		writeError(d.w, err)
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return cmpRow(rows[i], rows[j]) < 0 })
	total := len(rows)
	selected := selectRows(rows, vq)
	reduce := vd.Reduce != "" && (vq.reduce == nil || *vq.reduce)
	if vq.reduce != nil && *vq.reduce && vd.Reduce == "" {
		writeError(d.w, &hooks.Error{Status: 400, Err: "query_parse_error", Reason: "Reduce is invalid for map-only views."})
		return
	}
	if reduce {
		if vq.includeDocs {
			writeError(d.w, &hooks.Error{Status: 400, Err: "query_parse_error", Reason: "`include_docs` is invalid for reduce"})
			return
		}
		out, err := reduceRows(mapper, vd.Reduce, selected, vq)
		if err != nil {
			writeError(d.w, &hooks.Error{Status: 500, Err: "os_process_error", Reason: err.Error()})
			return
		}
		out = page(out, vq)
		for i := range out {
			out[i].ID = ""
		}
		res := map[string]any{"rows": out}
		if vq.updateSeq {
			res["update_seq"] = s.seqs.format(seq, d.db.UUID())
		}
		writeJSON(d.w, 200, res)
		return
	}
	offset := 0
	if len(selected) > 0 && !vq.hasKeys {
		for i, r := range rows {
			if r.ID == selected[0].ID && mango.Compare(r.Key, selected[0].Key) == 0 {
				offset = i
				if vq.descending {
					offset = total - 1 - i
				}
				break
			}
		}
	}
	selected = page(selected, vq)
	if vq.includeDocs {
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
	buf.WriteString(`{"total_rows":` + strconv.Itoa(total) + `,"offset":` + strconv.Itoa(offset))
	if vq.updateSeq {
		buf.WriteString(`,"update_seq":`)
		buf.Write(jsonobj.AppendString(nil, s.seqs.format(seq, d.db.UUID())))
	}
	buf.WriteString(`,"rows":[`)
	for i, r := range selected {
		if i > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\r\n")
		b, _ := jsonobj.Marshal(r)
		if vq.includeDocs && r.Doc == nil {
			b = append(b[:len(b)-1], []byte(`,"doc":null}`)...)
		}
		buf.Write(b)
	}
	buf.WriteString("\r\n]}")
	writeRawJSON(d.w, 200, buf.Bytes())
}

// selectRows applies keys, ranges and direction to sorted rows.
func selectRows(rows []viewRow, vq *viewQuery) []viewRow {
	if vq.hasKeys {
		var out []viewRow
		for _, k := range vq.keys {
			matched := []viewRow{}
			for _, r := range rows {
				if mango.Compare(r.Key, k) == 0 {
					matched = append(matched, r)
				}
			}
			if vq.descending {
				for i, j := 0, len(matched)-1; i < j; i, j = i+1, j-1 {
					matched[i], matched[j] = matched[j], matched[i]
				}
			}
			out = append(out, matched...)
		}
		return out
	}
	ordered := rows
	if vq.descending {
		ordered = make([]viewRow, len(rows))
		for i, r := range rows {
			ordered[len(rows)-1-i] = r
		}
	}
	var out []viewRow
	for _, r := range ordered {
		if vq.hasStart {
			c := mango.Compare(r.Key, vq.start)
			if c == 0 && vq.startDocID != "" {
				c = strings.Compare(r.ID, vq.startDocID)
			}
			if (!vq.descending && c < 0) || (vq.descending && c > 0) {
				continue
			}
		}
		if vq.hasEnd {
			c := mango.Compare(r.Key, vq.end)
			if c == 0 && vq.endDocID != "" {
				c = strings.Compare(r.ID, vq.endDocID)
			}
			if (!vq.descending && (c > 0 || (c == 0 && !vq.inclusiveEnd))) ||
				(vq.descending && (c < 0 || (c == 0 && !vq.inclusiveEnd))) {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// page applies skip and limit.
func page(rows []viewRow, vq *viewQuery) []viewRow {
	if vq.skip > 0 {
		if vq.skip >= len(rows) {
			return []viewRow{}
		}
		rows = rows[vq.skip:]
	}
	if vq.limit >= 0 && vq.limit < len(rows) {
		rows = rows[:vq.limit]
	}
	if rows == nil {
		rows = []viewRow{}
	}
	return rows
}

// groupKey truncates a key to the query's group level.
func groupKey(k any, vq *viewQuery) any {
	if !vq.group {
		return nil
	}
	if arr, ok := k.([]any); ok && vq.groupLevel > 0 && len(arr) > vq.groupLevel {
		return arr[:vq.groupLevel]
	}
	return k
}

// reduceRows groups rows by key (per group/group_level) and reduces each
// group with a built-in or JavaScript reduce function.
func reduceRows(m *jsfilter.Mapper, fn string, rows []viewRow, vq *viewQuery) ([]viewRow, error) {
	var out []viewRow
	for i := 0; i < len(rows); {
		gk := groupKey(rows[i].Key, vq)
		j := i
		for j < len(rows) && mango.Compare(groupKey(rows[j].Key, vq), gk) == 0 {
			j++
		}
		val, err := reduceGroup(m, fn, rows[i:j])
		if err != nil {
			return nil, err
		}
		out = append(out, viewRow{Key: gk, Value: val})
		i = j
	}
	return out, nil
}

func reduceGroup(m *jsfilter.Mapper, fn string, rows []viewRow) (any, error) {
	switch strings.TrimSpace(fn) {
	case "_count":
		return len(rows), nil
	case "_sum":
		var total any = 0.0
		for _, r := range rows {
			total = addValues(total, r.Value)
		}
		return total, nil
	case "_stats":
		st := map[string]float64{"sum": 0, "count": 0, "min": 0, "max": 0, "sumsqr": 0}
		for i, r := range rows {
			f, _ := r.Value.(float64)
			st["sum"] += f
			st["count"]++
			st["sumsqr"] += f * f
			if i == 0 || f < st["min"] {
				st["min"] = f
			}
			if i == 0 || f > st["max"] {
				st["max"] = f
			}
		}
		return st, nil
	case "_approx_count_distinct":
		seen := map[string]bool{}
		for _, r := range rows {
			b, _ := jsonobj.Marshal(r.Key)
			seen[string(b)] = true
		}
		return len(seen), nil
	}
	keys := make([][2]any, len(rows))
	values := make([]any, len(rows))
	for i, r := range rows {
		keys[i] = [2]any{r.Key, r.ID}
		values[i] = r.Value
	}
	return m.Reduce(fn, keys, values, false)
}

// addValues is _sum's addition: numbers, or arrays of numbers elementwise.
func addValues(a, b any) any {
	af, aok := a.(float64)
	bf, bok := b.(float64)
	if aok && bok {
		return af + bf
	}
	al, _ := a.([]any)
	if aok && af == 0 {
		al = nil
	}
	bl, _ := b.([]any)
	if !bok && bl == nil {
		return a
	}
	if bok {
		bl = []any{bf}
	}
	out := make([]any, max(len(al), len(bl)))
	for i := range out {
		var x, y float64
		if i < len(al) {
			x, _ = al[i].(float64)
		}
		if i < len(bl) {
			y, _ = bl[i].(float64)
		}
		out[i] = x + y
	}
	return out
}
