package couchapi

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/examples/minicouch/jsonenc"
	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
)

// Mango json indexes are stored as CouchDB stores them: a view of a design
// doc with "language": "query". minicouch keeps each index in memory
// (mango.Index), built on its first use and brought up to date from the
// changes feed at every query that uses it, as CouchDB updates its
// indexes; a restart rebuilds them.

// indexDef is one json index of a database.
type indexDef struct {
	DDoc    string // "_design/…"
	Name    string
	Fields  []string
	Partial json.RawMessage // partial_filter_selector; nil when none
}

// jsonView is how _index and _explain show the index.
func (x indexDef) jsonView() map[string]any {
	fields := make([]any, len(x.Fields))
	for i, f := range x.Fields {
		fields[i] = map[string]string{f: "asc"}
	}
	partial := json.RawMessage(`{}`)
	if x.Partial != nil {
		partial = x.Partial
	}
	return map[string]any{"ddoc": x.DDoc, "name": x.Name, "type": "json", "partitioned": false,
		"def": map[string]any{"fields": fields, "partial_filter_selector": partial}}
}

// builtIndex is an index's in-memory state: the ids by key, as of seq.
type builtIndex struct {
	mu      sync.Mutex
	idx     *mango.Index
	partial *mango.Selector
	seq     uint64
}

// mangoIndexes holds the built indexes of every db, by db uuid and index.
type mangoIndexes struct {
	mu    sync.Mutex
	built map[string]*builtIndex
}

// builtFor returns the built state of def in db, made on first use.
func (m *mangoIndexes) builtFor(db *store.DB, def indexDef) (*builtIndex, error) {
	key := db.UUID() + "\x00" + def.DDoc + "\x00" + def.Name + "\x00" + strings.Join(def.Fields, "\x00") + "\x00" + string(def.Partial)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.built == nil {
		m.built = map[string]*builtIndex{}
	}
	if b := m.built[key]; b != nil {
		return b, nil
	}
	b := &builtIndex{idx: mango.NewIndex(def.Fields)}
	if def.Partial != nil {
		sel, err := mango.Parse(def.Partial)
		if err != nil {
			return nil, err
		}
		b.partial = sel
	}
	m.built[key] = b
	return b, nil
}

// catchUp brings b up to the db's current seq from its changes feed.
func (s *Server) catchUp(ctx context.Context, d *dbReq, b *builtIndex) error {
	_, err := d.db.Changes(ctx, store.ChangesOptions{Since: b.seq}, func(ch store.Change) error {
		b.seq = ch.Seq
		if strings.HasPrefix(ch.ID, store.DesignPrefix) {
			return nil
		}
		doc, err := d.db.Get(ctx, ch.ID, store.GetOptions{})
		if err != nil {
			b.idx.Delete(ch.ID) // deleted, or gone meanwhile
			return nil
		}
		var m map[string]any
		if json.Unmarshal(doc.Body, &m) != nil || (b.partial != nil && !b.partial.Match(m)) {
			b.idx.Delete(ch.ID)
			return nil
		}
		m["_id"] = ch.ID
		b.idx.Put(ch.ID, m)
		return nil
	})
	return err
}

// indexDefs reads the json indexes of a database from its design docs,
// sorted by design doc and name.
func (s *Server) indexDefs(d *dbReq) ([]indexDef, error) {
	start, end := store.DesignPrefix, "_design0"
	var defs []indexDef
	_, err := d.db.AllDocs(d.ctx(), store.AllDocsOptions{StartKey: &start, EndKey: &end}, func(r store.AllDocsRow) error {
		doc, err := d.db.Get(d.ctx(), r.ID, store.GetOptions{})
		if err != nil {
			return nil
		}
		defs = append(defs, indexesOf(r.ID, doc.Body)...)
		return nil
	})
	sort.Slice(defs, func(i, j int) bool {
		return defs[i].DDoc < defs[j].DDoc || defs[i].DDoc == defs[j].DDoc && defs[i].Name < defs[j].Name
	})
	return defs, err
}

// queryDDoc is the part of a design doc that holds Mango indexes.
type queryDDoc struct {
	Language string `json:"language"`
	Views    map[string]struct {
		Options struct {
			Def struct {
				Fields  []any           `json:"fields"`
				Partial json.RawMessage `json:"partial_filter_selector"`
			} `json:"def"`
		} `json:"options"`
	} `json:"views"`
}

// indexesOf returns the json indexes a design doc holds.
func indexesOf(id string, body []byte) []indexDef {
	var dd queryDDoc
	if json.Unmarshal(body, &dd) != nil || dd.Language != "query" {
		return nil
	}
	var out []indexDef
	for name, v := range dd.Views {
		fields, ok := indexFields(v.Options.Def.Fields)
		if !ok {
			continue
		}
		x := indexDef{DDoc: id, Name: name, Fields: fields}
		if p := v.Options.Def.Partial; len(p) > 0 && string(p) != "{}" && string(p) != "null" {
			x.Partial = p
		}
		out = append(out, x)
	}
	return out
}

// indexFields reads `fields`: names, or {name: "asc"|"desc"} objects.
func indexFields(list []any) ([]string, bool) {
	if len(list) == 0 {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, f := range list {
		switch t := f.(type) {
		case string:
			out = append(out, t)
		case map[string]any:
			if len(t) != 1 {
				return nil, false
			}
			for k, dir := range t {
				if dir != "asc" && dir != "desc" {
					return nil, false
				}
				out = append(out, k)
			}
		default:
			return nil, false
		}
	}
	return out, true
}

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
	fields, ok := indexFields(index.Fields)
	if !ok {
		writeError(d.w, badRequest("Invalid index fields: each must be a field name or {field: \"asc\"|\"desc\"}"))
		return
	}
	partial := index.Partial
	if len(partial) == 0 {
		partial = body.Partial
	}
	if len(partial) > 0 && string(partial) != "null" {
		if _, err := mango.Parse(partial); err != nil {
			writeError(d.w, &hooks.Error{Status: 400, Err: "invalid_operator", Reason: err.Error()})
			return
		}
	} else {
		partial = json.RawMessage(`{}`)
	}
	sum := sha1.Sum([]byte(strings.Join(fields, "\x00") + "\x00" + string(partial)))
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
			for _, x := range indexesOf(ddoc, cur.Body) {
				if x.Name == name && strings.Join(x.Fields, "\x00") == strings.Join(fields, "\x00") {
					writeJSON(d.w, 200, map[string]string{"result": "exists", "id": ddoc, "name": name})
					return
				}
			}
		}
		mapFields := map[string]string{}
		for _, f := range fields {
			mapFields[f] = "asc"
		}
		views[name] = map[string]any{
			"map":     map[string]any{"fields": mapFields, "partial_filter_selector": partial},
			"reduce":  "_count",
			"options": map[string]any{"def": map[string]any{"fields": fields, "partial_filter_selector": partial}},
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
	raw, _ := jsonenc.Marshal(dd)
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

// chooseIndex picks the json index a query uses: the one use_index names
// when it can serve the selector (else a warning says why not), or the
// first that can; nil means the _all_docs scan. An index can serve a
// selector that bounds its first field, and a sort that is a prefix of its
// fields in one direction.
func chooseIndex(defs []indexDef, sel *mango.Selector, sorts []sortField, useIndex []string) (*indexDef, string) {
	usable := func(x indexDef) bool {
		if _, ok := sel.FieldRange(x.Fields[0]); !ok {
			return false
		}
		return sortPrefix(x.Fields, sorts)
	}
	warning := ""
	if len(useIndex) > 0 {
		ddoc := useIndex[0]
		if !strings.HasPrefix(ddoc, store.DesignPrefix) {
			ddoc = store.DesignPrefix + ddoc
		}
		for i, x := range defs {
			if x.DDoc == ddoc && (len(useIndex) < 2 || x.Name == useIndex[1]) && usable(x) {
				return &defs[i], ""
			}
		}
		warning = strings.Join(useIndex, ", ") + " was not used because it does not contain a valid index for this query."
	}
	for i, x := range defs {
		if usable(x) {
			return &defs[i], warning
		}
	}
	return nil, warning
}

// sortPrefix reports whether sorts (empty, or all one direction) are a
// prefix of fields.
func sortPrefix(fields []string, sorts []sortField) bool {
	if len(sorts) > len(fields) {
		return false
	}
	for i, s := range sorts {
		if strings.Join(s.path, ".") != fields[i] || s.desc != sorts[0].desc {
			return false
		}
	}
	return true
}

// sortByIDOnly reports whether sorts can be served by _all_docs.
func sortByIDOnly(sorts []sortField) bool {
	for _, s := range sorts {
		if strings.Join(s.path, ".") != "_id" || s.desc != sorts[0].desc {
			return false
		}
	}
	return true
}

// errNoIndexForSort is CouchDB's answer to a sort no index serves.
var errNoIndexForSort = &hooks.Error{Status: 400, Err: "no_usable_index", Reason: "No index exists for this sort, try indexing by the sort fields."}

// useIndexOf reads use_index: "ddoc" or ["ddoc"] or ["ddoc", "name"].
func useIndexOf(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil && one != "" {
		return []string{one}
	}
	var list []string
	json.Unmarshal(raw, &list)
	return list
}
