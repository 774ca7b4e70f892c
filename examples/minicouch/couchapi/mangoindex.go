package couchapi

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// createIndex serves POST /{db}/_index.
func (s *Server) createIndex(d *dbReq) {
	var body struct {
		Index   json.RawMessage `json:"index"`
		DDoc    string          `json:"ddoc"`
		Name    string          `json:"name"`
		Type    string          `json:"type"`
		Partial json.RawMessage `json:"partial_filter_selector"`
	}
	if herr := readJSONRequest(d.r, &body); herr != nil {
		writeError(d.w, herr)
		return
	}
	if t := strings.TrimSpace(string(body.Index)); t == "" || t == "null" {
		writeError(d.w, &hooks.Error{Status: 400, Err: "missing_required_key", Reason: "Missing required key: index"})
		return
	}
	if body.Type != "" && body.Type != "json" {
		writeError(d.w, &hooks.Error{Status: 400, Err: "invalid_index_type", Reason: "minicouch has json indexes only, not " + body.Type})
		return
	}
	var index struct {
		Fields  []any           `json:"fields"`
		Partial json.RawMessage `json:"partial_filter_selector"`
	}
	if json.Unmarshal(body.Index, &index) != nil || len(index.Fields) == 0 {
		writeError(d.w, &hooks.Error{Status: 400, Err: "missing_required_key", Reason: "Missing required key: fields"})
		return
	}
	fields, desc, herr := mango.IndexFields(index.Fields)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	dir := "asc"
	if desc {
		dir = "desc"
	}
	partial := index.Partial
	if len(partial) == 0 {
		partial = body.Partial
	}
	normalized := json.RawMessage(`{}`)
	if len(partial) > 0 && string(partial) != "null" {
		var err error
		if normalized, err = mango.Normalize(partial); err != nil {
			writeError(d.w, &hooks.Error{Status: 400, Err: "invalid_operator", Reason: err.Error()})
			return
		}
	} else {
		partial = json.RawMessage(`{}`)
	}
	// The generated names hash the whole definition, the given name
	// included, as CouchDB's do: two indexes of the same fields under
	// two names get two design docs.
	sum := sha1.Sum([]byte(strings.Join(fields, "\x00") + "\x00" + dir + "\x00" + string(partial) + "\x00" + body.Name))
	hash := hex.EncodeToString(sum[:])
	ddoc, name := body.DDoc, body.Name
	if ddoc == "" {
		ddoc = hash
	}
	if !strings.HasPrefix(ddoc, store.DesignPrefix) {
		ddoc = store.DesignPrefix + ddoc
	}
	if name == "" {
		name = hash
	}
	if herr := checkDesignWrite(d, ddoc); herr != nil {
		writeError(d.w, herr)
		return
	}
	for {
		dd := map[string]any{"_id": ddoc, "language": "query"}
		views := map[string]any{}
		cur, err := d.db.Get(d.ctx(), ddoc, store.GetOptions{})
		if err == nil {
			var existing map[string]any
			json.Unmarshal(cur.Body, &existing)
			for k, v := range existing {
				dd[k] = v
			}
			dd["_rev"] = cur.Rev
			if lang, _ := existing["language"].(string); lang != "query" {
				writeError(d.w, badRequest("Design document "+ddoc+" holds JavaScript views, not Mango indexes"))
				return
			}
			if v, ok := existing["views"].(map[string]any); ok {
				views = v
			}
			for _, x := range mango.IndexesOf(ddoc, cur.Body) {
				if x.Name == name && strings.Join(x.Fields, "\x00") == strings.Join(fields, "\x00") && x.Desc == desc {
					writeJSON(d.w, 200, map[string]string{"result": "exists", "id": ddoc, "name": name})
					return
				}
			}
		}
		// the map's fields in their order, as CouchDB writes them
		mapFields := []byte{'{'}
		for i, f := range fields {
			if i > 0 {
				mapFields = append(mapFields, ',')
			}
			mapFields = append(jsonobj.AppendString(mapFields, f), `:"`+dir+`"`...)
		}
		mapFields = append(mapFields, '}')
		// options.def is the definition as given, as CouchDB keeps it
		def := map[string]any{"fields": index.Fields}
		if string(partial) != "{}" {
			def["partial_filter_selector"] = partial
		}
		views[name] = map[string]any{
			"map":     map[string]any{"fields": json.RawMessage(mapFields), "partial_filter_selector": normalized},
			"reduce":  "_count",
			"options": map[string]any{"def": def},
		}
		dd["views"] = views
		if err := s.writeDesignDoc(d, dd); err != nil {
			if he := asCouchError(err); he.Status == 409 {
				continue // the design doc changed meanwhile: read it again
			}
			writeError(d.w, err)
			return
		}
		writeJSON(d.w, 200, map[string]string{"result": "created", "id": ddoc, "name": name})
		return
	}
}

// deleteIndex serves DELETE /{db}/_index/{ddoc}/json/{name}.
func (s *Server) deleteIndex(d *dbReq, ddoc, name string) {
	if !strings.HasPrefix(ddoc, store.DesignPrefix) {
		ddoc = store.DesignPrefix + ddoc
	}
	if herr := checkDesignWrite(d, ddoc); herr != nil {
		writeError(d.w, herr)
		return
	}
	errMissing := &hooks.Error{Status: 404, Err: "not_found", Reason: "Index not found"}
	cur, err := d.db.Get(d.ctx(), ddoc, store.GetOptions{})
	if err != nil {
		writeError(d.w, errMissing)
		return
	}
	var dd map[string]any
	json.Unmarshal(cur.Body, &dd)
	views, _ := dd["views"].(map[string]any)
	if lang, _ := dd["language"].(string); lang != "query" || views[name] == nil {
		writeError(d.w, errMissing)
		return
	}
	delete(views, name)
	dd["_id"], dd["_rev"] = ddoc, cur.Rev
	if len(views) == 0 {
		dd = map[string]any{"_id": ddoc, "_rev": cur.Rev, "_deleted": true}
	}
	if err := s.writeDesignDoc(d, dd); err != nil {
		writeError(d.w, err)
		return
	}
	writeJSON(d.w, 200, okJSON)
}

// writeDesignDoc writes an index design doc through the write path, as
// the requesting user.
func (s *Server) writeDesignDoc(d *dbReq, dd map[string]any) error {
	raw, _ := jsonobj.Marshal(dd)
	doc, herr := parseDocBody(raw)
	if herr != nil {
		return herr
	}
	res, err := s.writeDocs(d.ctx(), d.db, []*store.Doc{doc}, writeOpts{newEdits: true, user: d.user})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	return err
}
