package couchapi

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
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
	Desc    bool            // its fields given as {field: "desc"}
	Partial json.RawMessage // partial_filter_selector; nil when none
}

// jsonView is how _index and _explain show the index.
func (x indexDef) jsonView() map[string]any {
	fields := make([]any, len(x.Fields))
	for i, f := range x.Fields {
		fields[i] = map[string]string{f: x.dir()}
	}
	def := map[string]any{"fields": fields}
	if x.Partial != nil { // CouchDB leaves out an empty one
		def["partial_filter_selector"] = x.Partial
	}
	return map[string]any{"ddoc": x.DDoc, "name": x.Name, "type": "json", "partitioned": false, "def": def}
}

// dir is the direction of the index's fields.
func (x indexDef) dir() string {
	if x.Desc {
		return "desc"
	}
	return "asc"
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
		Map struct {
			Partial json.RawMessage `json:"partial_filter_selector"`
		} `json:"map"`
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
		fields, desc, herr := indexFields(v.Options.Def.Fields)
		if herr != nil {
			continue
		}
		x := indexDef{DDoc: id, Name: name, Fields: fields, Desc: desc}
		// the map's is the normalized selector, the one CouchDB shows
		p := v.Map.Partial
		if len(p) == 0 {
			p = v.Options.Def.Partial
		}
		if len(p) > 0 && string(p) != "{}" && string(p) != "null" {
			x.Partial = p
		}
		out = append(out, x)
	}
	return out
}

// indexFields reads `fields`: names, or {name: "asc"|"desc"} objects,
// all in one direction (desc: "desc"), as CouchDB takes them.
func indexFields(list []any) (fields []string, desc bool, herr *hooks.Error) {
	if len(list) == 0 {
		return nil, false, &hooks.Error{Status: 400, Err: "missing_required_key", Reason: "Missing required key: fields"}
	}
	invalid := func(f any) *hooks.Error {
		b, _ := json.Marshal(f)
		return &hooks.Error{Status: 400, Err: "invalid_sort_field", Reason: "Invalid sort field: " + string(b)}
	}
	out := make([]string, 0, len(list))
	for i, f := range list {
		d := false
		switch t := f.(type) {
		case string:
			out = append(out, t)
		case map[string]any:
			if len(t) != 1 {
				return nil, false, invalid(f)
			}
			for k, dir := range t {
				if dir != "asc" && dir != "desc" {
					return nil, false, invalid(f)
				}
				out = append(out, k)
				d = dir == "desc"
			}
		default:
			return nil, false, invalid(f)
		}
		if i == 0 {
			desc = d
		} else if d != desc {
			return nil, false, errMixedSort
		}
	}
	return out, desc, nil
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
	fields, desc, herr := indexFields(index.Fields)
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
			for _, x := range indexesOf(ddoc, cur.Body) {
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

// chooseIndex picks the json index a query uses as CouchDB's planner
// does. An index is usable when the selector requires each of its
// columns to exist (but _id, _rev and the sort's fields) and the sort is
// a run of its columns, after columns the selector holds constant; one
// with a partial_filter_selector only when use_index names it. Of the
// usable ones use_index picks its own (if none is usable a warning says
// so and the choice falls back to the others), else the best ranked:
// the fewest indexable fields of the selector left out of its leading
// columns, then the fewest columns, then by design doc and name. nil
// means the _all_docs scan.
func chooseIndex(defs []indexDef, sel *mango.Selector, sorts []sortField, useIndex []string) (*indexDef, string) {
	named := func(x indexDef) bool {
		if len(useIndex) == 0 {
			return false
		}
		ddoc := useIndex[0]
		if !strings.HasPrefix(ddoc, store.DesignPrefix) {
			ddoc = store.DesignPrefix + ddoc
		}
		return x.DDoc == ddoc && (len(useIndex) < 2 || x.Name == useIndex[1])
	}
	sortKeys := map[string]bool{}
	for _, s := range sorts {
		sortKeys[mango.PathKey(joinField(s.path))] = true
	}
	usable := func(x indexDef) bool {
		for _, f := range x.Fields {
			k := mango.PathKey(f)
			if k == "_id" || k == "_rev" || sortKeys[k] {
				continue
			}
			if !sel.Requires(f) {
				return false
			}
		}
		return canUseSort(x.Fields, sorts, sel)
	}
	var cands, chosen []int
	for i, x := range defs {
		if (x.Partial == nil || named(x)) && usable(x) {
			cands = append(cands, i)
			if named(x) {
				chosen = append(chosen, i)
			}
		}
	}
	warning := ""
	switch {
	case len(chosen) > 0:
		cands = chosen
	case len(useIndex) == 1:
		warning = store.DesignPrefix + strings.TrimPrefix(useIndex[0], store.DesignPrefix) + " was not used because it does not contain a valid index for this query."
	case len(useIndex) > 1:
		warning = store.DesignPrefix + strings.TrimPrefix(useIndex[0], store.DesignPrefix) + ", " + useIndex[1] + " was not used because it is not a valid index for this query."
	}
	if len(cands) == 0 {
		return nil, warning
	}
	indexable := sel.IndexableFields()
	// missed is how many of the selector's indexable fields the index's
	// leading columns leave out
	missed := func(x indexDef) int {
		n := 0
		for _, f := range x.Fields {
			if !indexable[mango.PathKey(f)] {
				break
			}
			n++
		}
		return len(indexable) - n
	}
	best := cands[0]
	for _, i := range cands[1:] {
		a, b := defs[i], defs[best]
		if ma, mb := missed(a), missed(b); ma < mb || ma == mb && len(a.Fields) < len(b.Fields) {
			best = i // defs are sorted by design doc and name
		}
	}
	return &defs[best], warning
}

// canUseSort reports whether an index on fields yields the sort's order:
// the sort's fields are a run of its columns, every column before the
// run held constant ($eq) by the selector.
func canUseSort(fields []string, sorts []sortField, sel *mango.Selector) bool {
	if len(sorts) == 0 {
		return true
	}
	for i, f := range fields {
		if mango.PathKey(f) == mango.PathKey(joinField(sorts[0].path)) {
			if len(sorts) > len(fields)-i {
				return false
			}
			for j, s := range sorts {
				if mango.PathKey(fields[i+j]) != mango.PathKey(joinField(s.path)) {
					return false
				}
			}
			return true
		}
		if !sel.IsConstant(f) {
			return false
		}
	}
	return false
}

// joinField is the field name of a path, its dots escaped.
func joinField(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = strings.ReplaceAll(p, ".", `\.`)
	}
	return strings.Join(parts, ".")
}

// sortByIDOnly reports whether sorts can be served by _all_docs.
func sortByIDOnly(sorts []sortField) bool {
	for _, s := range sorts {
		if len(s.path) != 1 || s.path[0] != "_id" {
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
