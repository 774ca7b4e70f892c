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
// $eq, $gt, $gte, $lt and $lte, alone or under $and), and whether it puts
// any. A selector without a bound on an index's first field cannot use the
// index.
func (s *Selector) FieldRange(field string) (Range, bool) {
	var r Range
	found := false
	path := strings.Join(splitPath(field), "\x00")
	var visit func(n node)
	visit = func(n node) {
		switch t := n.(type) {
		case andNode:
			for _, c := range t {
				visit(c)
			}
		case fieldNode:
			if strings.Join(t.path, "\x00") == path {
				found = r.add(t.child) || found
			}
		}
	}
	visit(s.root)
	return r, found
}

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
