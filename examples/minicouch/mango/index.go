package mango

import (
	"sort"
	"strings"
)

// Index is a Mango json index: the ids of the documents that have every one
// of Fields, sorted by those fields' values (CouchDB's collation), then by
// id. It is kept in memory and changed document by document (Put, Delete).
type Index struct {
	Fields  []string
	paths   [][]string
	entries []indexEntry     // sorted
	keys    map[string][]any // id -> its key, for Put and Delete
}

type indexEntry struct {
	key []any
	id  string
}

// NewIndex returns an empty index over fields (dotted paths).
func NewIndex(fields []string) *Index {
	x := &Index{Fields: fields, keys: map[string][]any{}}
	for _, f := range fields {
		x.paths = append(x.paths, splitPath(f))
	}
	return x
}

// Len is the number of indexed documents.
func (x *Index) Len() int { return len(x.entries) }

func (x *Index) less(a, b indexEntry) bool {
	for i := range a.key {
		if c := Compare(a.key[i], b.key[i]); c != 0 {
			return c < 0
		}
	}
	return a.id < b.id
}

// search is the position of e, or where it would go.
func (x *Index) search(e indexEntry) int {
	return sort.Search(len(x.entries), func(i int) bool { return !x.less(x.entries[i], e) })
}

// Put indexes doc under id, replacing its previous entry; a doc without
// all of the fields is not indexed (as CouchDB's json indexes).
func (x *Index) Put(id string, doc map[string]any) {
	x.Delete(id)
	key := make([]any, len(x.paths))
	for i, p := range x.paths {
		v, ok := Lookup(doc, p)
		if !ok {
			return
		}
		key[i] = v
	}
	e := indexEntry{key: key, id: id}
	i := x.search(e)
	x.entries = append(x.entries, indexEntry{})
	copy(x.entries[i+1:], x.entries[i:])
	x.entries[i] = e
	x.keys[id] = key
}

// Delete removes id's entry, if any.
func (x *Index) Delete(id string) {
	key, ok := x.keys[id]
	if !ok {
		return
	}
	delete(x.keys, id)
	i := x.search(indexEntry{key: key, id: id})
	if i < len(x.entries) && x.entries[i].id == id {
		x.entries = append(x.entries[:i], x.entries[i+1:]...)
	}
}

// Scan calls fn with the ids whose first field lies in r, in key order
// (reversed when desc), until fn returns false.
func (x *Index) Scan(r Range, desc bool, fn func(id string) bool) {
	lo := 0
	if r.HasLo {
		lo = sort.Search(len(x.entries), func(i int) bool {
			c := Compare(x.entries[i].key[0], r.Lo)
			return c > 0 || c == 0 && r.LoIncl
		})
	}
	hi := len(x.entries)
	if r.HasHi {
		hi = sort.Search(len(x.entries), func(i int) bool {
			c := Compare(x.entries[i].key[0], r.Hi)
			return c > 0 || c == 0 && !r.HiIncl
		})
	}
	if desc {
		for i := hi - 1; i >= lo; i-- {
			if !fn(x.entries[i].id) {
				return
			}
		}
		return
	}
	for i := lo; i < hi; i++ {
		if !fn(x.entries[i].id) {
			return
		}
	}
}

// Range bounds the values of one field.
type Range struct {
	Lo, Hi         any
	HasLo, HasHi   bool
	LoIncl, HiIncl bool
}

// FieldRange returns the bounds the selector puts on field (top-level
// $eq, $gt, $gte, $lt, $lte and $beginsWith, alone or under $and), and
// whether it puts any. An index scan of field is confined to them.
func (s *Selector) FieldRange(field string) (Range, bool) {
	var r Range
	found := false
	key := pathKey(splitPath(field))
	for _, c := range s.conjuncts() {
		if pathKey(c.path) == key {
			found = r.add(c.cond) || found
		}
	}
	return r, found
}

// conjunct is one condition of the selector's top-level conjunction on a
// field: nested objects are flattened into dotted paths, as CouchDB
// normalizes selectors ({"a":{"b":1}} is {"a.b":{"$eq":1}}).
type conjunct struct {
	path []string
	cond node
}

func pathKey(path []string) string { return strings.Join(path, "\x00") }

// conjuncts lists the conditions of the top-level conjunction ($and seen
// through, nothing under $or, $nor, $not).
func (s *Selector) conjuncts() []conjunct {
	var out []conjunct
	var top func(n node)
	top = func(n node) {
		switch t := n.(type) {
		case andNode:
			for _, c := range t {
				top(c)
			}
		case fieldNode:
			out = appendUnder(out, t.path, t.child)
		}
	}
	top(s.root)
	return out
}

// appendUnder appends the conditions n puts on the field at path.
func appendUnder(out []conjunct, path []string, n node) []conjunct {
	switch t := n.(type) {
	case fieldNode:
		return appendUnder(out, append(append([]string(nil), path...), t.path...), t.child)
	case andNode:
		for _, c := range t {
			out = appendUnder(out, path, c)
		}
		return out
	}
	return append(out, conjunct{path: path, cond: n})
}

// required is the set of fields (pathKey) n requires to exist, as
// CouchDB's mango_selector:has_required_fields sees it: any condition but
// {"$exists": false} on a field of the conjunction, or one every branch
// of an $or requires.
func required(n node) map[string]bool {
	set := map[string]bool{}
	switch t := n.(type) {
	case andNode:
		for _, c := range t {
			for k := range required(c) {
				set[k] = true
			}
		}
	case orNode:
		for i, c := range t {
			sub := required(c)
			if i == 0 {
				set = sub
				continue
			}
			for k := range set {
				if !sub[k] {
					delete(set, k)
				}
			}
		}
	case fieldNode:
		for _, c := range appendUnder(nil, t.path, t.child) {
			if e, ok := c.cond.(existsNode); ok && !bool(e) {
				continue
			}
			set[pathKey(c.path)] = true
		}
	}
	return set
}

// Requires reports whether every document the selector matches has
// field (a field name, dots splitting it): what CouchDB asks of each
// column of a json index it uses, but _id, _rev and the sort's fields.
func (s *Selector) Requires(field string) bool {
	return required(s.root)[pathKey(splitPath(field))]
}

// IndexableFields are the fields of the top-level conjunction with a
// condition an index can be scanned for ($lt, $lte, $eq, $gt, $gte,
// $beginsWith, $exists), each once, as pathKey: how CouchDB ranks the
// indexes a query can use.
func (s *Selector) IndexableFields() map[string]bool {
	set := map[string]bool{}
	for _, c := range s.conjuncts() {
		switch c.cond.(type) {
		case cmpNode:
			if c.cond.(cmpNode).op == "$ne" {
				continue
			}
		case prefixNode, existsNode:
		default:
			continue
		}
		set[pathKey(c.path)] = true
	}
	return set
}

// IsConstant reports whether the first condition of the conjunction on
// field is an $eq: a column the index scan holds constant, so a sort may
// start after it (CouchDB's mango_selector:is_constant_field).
func (s *Selector) IsConstant(field string) bool {
	key := pathKey(splitPath(field))
	for _, c := range s.conjuncts() {
		if pathKey(c.path) == key {
			n, ok := c.cond.(cmpNode)
			return ok && n.op == "$eq"
		}
	}
	return false
}

// PathKey is the key IndexableFields uses for field.
func PathKey(field string) string { return pathKey(splitPath(field)) }

// add narrows r by the comparisons in n; it reports whether n held any.
func (r *Range) add(n node) bool {
	switch t := n.(type) {
	case andNode:
		any := false
		for _, c := range t {
			any = r.add(c) || any
		}
		return any
	case cmpNode:
		switch t.op {
		case "$eq":
			r.lower(t.arg, true)
			r.upper(t.arg, true)
		case "$gt":
			r.lower(t.arg, false)
		case "$gte":
			r.lower(t.arg, true)
		case "$lt":
			r.upper(t.arg, false)
		case "$lte":
			r.upper(t.arg, true)
		default:
			return false
		}
		return true
	case prefixNode:
		// U+FFFF sorts after every string with the prefix
		r.lower(string(t), true)
		r.upper(string(t)+"\uffff", true)
		return true
	}
	return false
}

func (r *Range) lower(v any, incl bool) {
	if !r.HasLo || Compare(v, r.Lo) > 0 || Compare(v, r.Lo) == 0 && !incl {
		r.Lo, r.LoIncl, r.HasLo = v, incl, true
	}
}

func (r *Range) upper(v any, incl bool) {
	if !r.HasHi || Compare(v, r.Hi) < 0 || Compare(v, r.Hi) == 0 && !incl {
		r.Hi, r.HiIncl, r.HasHi = v, incl, true
	}
}

// Lookup returns the value at path (a field name split at its dots) in a
// decoded document.
func Lookup(doc any, path []string) (any, bool) {
	for _, p := range path {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = m[p]; !ok {
			return nil, false
		}
	}
	return doc, true
}
