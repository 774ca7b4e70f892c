package couchapi

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
)

// ddocFieldTypes are the JSON types CouchDB requires of a design doc's
// members (couch_mrview's validation): member → type.
var ddocFieldTypes = []struct{ field, kind string }{
	{"filters", "object"}, {"language", "string"}, {"lists", "object"}, {"options", "object"},
	{"shows", "object"}, {"updates", "object"}, {"validate_doc_update", "string"}, {"views", "object"},
}

// validateDesignDoc refuses a design doc CouchDB refuses: a member of the
// wrong type, a view that is not an object, without a string map function
// or with a reduce that is not a string. Deletions pass.
func validateDesignDoc(doc *store.Doc) *hooks.Error {
	if doc.Deleted || !strings.HasPrefix(doc.ID, store.DesignPrefix) {
		return nil
	}
	var dd map[string]json.RawMessage
	if json.Unmarshal(doc.Body, &dd) != nil {
		return nil // the body's own checks answer
	}
	for _, f := range ddocFieldTypes {
		if v, ok := dd[f.field]; ok && jsonKindOf(v) != f.kind {
			return invalidDesignDoc("`" + f.field + "` field must have " + f.kind + " type")
		}
	}
	var views map[string]json.RawMessage
	if json.Unmarshal(dd["views"], &views) != nil {
		return nil
	}
	names := make([]string, 0, len(views))
	for n := range views {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "lib" {
			if jsonKindOf(views[name]) != "object" {
				return invalidDesignDoc("`lib` field must have object type")
			}
			continue
		}
		var view map[string]json.RawMessage
		if jsonKindOf(views[name]) != "object" || json.Unmarshal(views[name], &view) != nil {
			return invalidDesignDoc("View `" + name + "` must be an object")
		}
		m, ok := view["map"]
		if !ok {
			return invalidDesignDoc("View `" + name + "` must contain map function")
		}
		if k := jsonKindOf(m); k != "string" && !(k == "object" && langIsQuery(dd)) {
			return invalidDesignDoc("`map` field must have string type")
		}
		if r, ok := view["reduce"]; ok && jsonKindOf(r) != "string" {
			return invalidDesignDoc("`reduce` field must have string type")
		}
	}
	return nil
}

// langIsQuery reports whether a design doc holds Mango (language
// "query") views, whose map is an object.
func langIsQuery(dd map[string]json.RawMessage) bool {
	var lang string
	return json.Unmarshal(dd["language"], &lang) == nil && lang == "query"
}

func invalidDesignDoc(reason string) *hooks.Error {
	return &hooks.Error{Status: 400, Err: "invalid_design_doc", Reason: reason}
}

// jsonKindOf names the JSON type of a value: object, array, string,
// number, boolean or null.
func jsonKindOf(v json.RawMessage) string {
	t := strings.TrimSpace(string(v))
	if t == "" {
		return ""
	}
	switch t[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
