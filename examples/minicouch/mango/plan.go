package mango

import (
	"encoding/json"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
)

// IndexDef is one json index of a database, as its design doc defines it.
type IndexDef struct {
	DDoc    string // "_design/…"
	Name    string
	Fields  []string
	Desc    bool            // its fields given as {field: "desc"}
	Partial json.RawMessage // partial_filter_selector; nil when none
}

// JSONView is how _index and _explain show the index.
func (x IndexDef) JSONView() map[string]any {
	fields := make([]any, len(x.Fields))
	for i, f := range x.Fields {
		fields[i] = map[string]string{f: x.Dir()}
	}
	def := map[string]any{"fields": fields}
	if x.Partial != nil { // CouchDB leaves out an empty one
		def["partial_filter_selector"] = x.Partial
	}
	return map[string]any{"ddoc": x.DDoc, "name": x.Name, "type": "json", "partitioned": false, "def": def}
}

// Dir is the direction of the index's fields: "asc" or "desc".
func (x IndexDef) Dir() string {
	if x.Desc {
		return "desc"
	}
	return "asc"
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

// IndexesOf returns the json indexes the design doc id with body holds.
func IndexesOf(id string, body []byte) []IndexDef {
	var dd queryDDoc
	if json.Unmarshal(body, &dd) != nil || dd.Language != "query" {
		return nil
	}
	var out []IndexDef
	for name, v := range dd.Views {
		fields, desc, err := IndexFields(v.Options.Def.Fields)
		if err != nil {
			continue
		}
		x := IndexDef{DDoc: id, Name: name, Fields: fields, Desc: desc}
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

// IndexFields reads an index's `fields`: names, or {name: "asc"|"desc"}
// objects, all in one direction (desc: "desc"), as CouchDB takes them.
func IndexFields(list []any) (fields []string, desc bool, err *hooks.Error) {
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
			return nil, false, ErrMixedSort
		}
	}
	return out, desc, nil
}

// SortField is one `sort` entry of a query: a field path and its direction.
type SortField struct {
	Path []string
	Desc bool
}

// ParseSort reads a query's `sort`: field names, or {field: "asc"|"desc"}
// objects, all in one direction.
func ParseSort(list []any) ([]SortField, *hooks.Error) {
	var out []SortField
	for _, s := range list {
		switch x := s.(type) {
		case string:
			out = append(out, SortField{Path: SplitField(x)})
		case map[string]any:
			if len(x) != 1 {
				return nil, &hooks.Error{Status: 400, Err: "invalid_sort_json", Reason: "Sort must be an array of field names or {field: direction} objects"}
			}
			for k, v := range x {
				dir, _ := v.(string)
				if dir != "asc" && dir != "desc" {
					return nil, &hooks.Error{Status: 400, Err: "invalid_sort_json", Reason: "Sort direction must be asc or desc"}
				}
				out = append(out, SortField{Path: SplitField(k), Desc: dir == "desc"})
			}
		default:
			return nil, &hooks.Error{Status: 400, Err: "invalid_sort_json", Reason: "Sort must be an array of field names or {field: direction} objects"}
		}
	}
	for _, sf := range out {
		if sf.Desc != out[0].Desc {
			return nil, ErrMixedSort
		}
	}
	return out, nil
}

// ParseUseIndex reads use_index: "ddoc" or ["ddoc"] or ["ddoc", "name"].
func ParseUseIndex(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil && one != "" {
		return []string{one}
	}
	var list []string
	json.Unmarshal(raw, &list)
	return list
}

// Errors of planning a query, as CouchDB answers them.
var (
	// ErrMixedSort: a sort, or index fields, in more than one direction.
	ErrMixedSort = &hooks.Error{Status: 400, Err: "unsupported_mixed_sort", Reason: "Sorts currently only support a single direction for all fields."}
	// ErrNoIndexForSort: a sort that no index serves.
	ErrNoIndexForSort = &hooks.Error{Status: 400, Err: "no_usable_index", Reason: "No index exists for this sort, try indexing by the sort fields."}
)

// Plan picks the index a query runs on (nil: the _all_docs scan) and
// the warning its answer carries, or refuses a sort no index serves.
func Plan(defs []IndexDef, sel *Selector, sorts []SortField, useIndex []string) (*IndexDef, string, error) {
	idx, warning := ChooseIndex(defs, sel, sorts, useIndex)
	if idx == nil && len(sorts) > 0 && !sortByIDOnly(sorts) {
		return nil, "", ErrNoIndexForSort
	}
	return idx, warning, nil
}

// ChooseIndex picks the json index a query uses as CouchDB's planner
// does. An index is usable when the selector requires each of its
// columns to exist (but _id, _rev and the sort's fields) and the sort is
// a run of its columns, after columns the selector holds constant; one
// with a partial_filter_selector only when use_index names it. Of the
// usable ones use_index picks its own (if none is usable a warning says
// so and the choice falls back to the others), else the best ranked:
// the fewest indexable fields of the selector left out of its leading
// columns, then the fewest columns, then by design doc and name (defs
// are in that order). nil means the _all_docs scan.
func ChooseIndex(defs []IndexDef, sel *Selector, sorts []SortField, useIndex []string) (*IndexDef, string) {
	named := func(x IndexDef) bool {
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
		sortKeys[PathKey(joinField(s.Path))] = true
	}
	usable := func(x IndexDef) bool {
		for _, f := range x.Fields {
			k := PathKey(f)
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
	missed := func(x IndexDef) int {
		n := 0
		for _, f := range x.Fields {
			if !indexable[PathKey(f)] {
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
			best = i
		}
	}
	return &defs[best], warning
}

// canUseSort reports whether an index on fields yields the sort's order:
// the sort's fields are a run of its columns, every column before the
// run held constant ($eq) by the selector.
func canUseSort(fields []string, sorts []SortField, sel *Selector) bool {
	if len(sorts) == 0 {
		return true
	}
	for i, f := range fields {
		if PathKey(f) == PathKey(joinField(sorts[0].Path)) {
			if len(sorts) > len(fields)-i {
				return false
			}
			for j, s := range sorts {
				if PathKey(fields[i+j]) != PathKey(joinField(s.Path)) {
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
func sortByIDOnly(sorts []SortField) bool {
	for _, s := range sorts {
		if len(s.Path) != 1 || s.Path[0] != "_id" {
			return false
		}
	}
	return true
}
