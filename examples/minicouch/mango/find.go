package mango

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
)

// Query is a _find request, read.
type Query struct {
	Selector *Selector
	Sort     []SortField
	Limit    int // at most this many docs; negative: no limit
	Skip     int
	UseIndex []string // use_index: ddoc, or ddoc and name
}

// FindResult is the answer to a Query.
type FindResult struct {
	Docs    []map[string]any // matching docs, after Skip and Limit
	Index   *IndexDef        // the index used; nil: the _all_docs scan
	Warning string
	// KeysExamined and DocsExamined are CouchDB's execution_stats.
	KeysExamined, DocsExamined int
}

// Find runs q on db: through the json index Plan picks (its entries in
// key order, each doc read and matched against the whole selector), or
// by scanning _all_docs. load reads a doc as the answer shows it; a nil
// body (and nil error) means the doc is gone.
func (m *Indexes) Find(ctx context.Context, db *store.DB, q Query, load func(id string) ([]byte, error)) (FindResult, error) {
	var res FindResult
	defs, err := ReadIndexDefs(ctx, db)
	if err != nil {
		return res, err
	}
	idx, warning, err := Plan(defs, q.Selector, q.Sort, q.UseIndex)
	if err != nil {
		return res, err
	}
	res.Index = idx
	var docs []map[string]any
	// take reads, matches and keeps one doc; false once enough are kept
	// for an unsorted (or index-ordered) answer.
	ordered := idx != nil || len(q.Sort) == 0
	take := func(id string) (bool, error) {
		body, err := load(id)
		if err != nil {
			return false, err
		}
		if body == nil {
			return true, nil // gone meanwhile
		}
		res.DocsExamined++
		var doc map[string]any
		if json.Unmarshal(body, &doc) != nil || !q.Selector.Match(doc) {
			return true, nil
		}
		docs = append(docs, doc)
		return !(ordered && q.Limit >= 0 && len(docs) >= q.Skip+q.Limit), nil
	}
	if idx != nil {
		b, err := m.builtFor(db, *idx)
		if err != nil {
			return res, err
		}
		var ids []string
		b.mu.Lock()
		err = b.catchUp(ctx, db)
		r, _ := q.Selector.FieldRange(idx.Fields[0])
		b.idx.Scan(r, len(q.Sort) > 0 && q.Sort[0].Desc, func(id string) bool { ids = append(ids, id); return true })
		b.mu.Unlock()
		if err != nil {
			return res, err
		}
		for _, id := range ids {
			res.KeysExamined++
			more, err := take(id)
			if err != nil {
				return res, err
			}
			if !more {
				break
			}
		}
	} else {
		_, err = db.AllDocs(ctx, store.AllDocsOptions{}, func(r store.AllDocsRow) error {
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
			return res, err
		}
		if len(q.Sort) > 0 { // by _id only (Plan checked)
			sort.SliceStable(docs, func(i, j int) bool {
				for _, sf := range q.Sort {
					a, _ := Lookup(docs[i], sf.Path)
					b, _ := Lookup(docs[j], sf.Path)
					// ids in _all_docs order, CouchDB's order of _id
					if c := CompareRaw(a, b); c != 0 {
						return (c < 0) != sf.Desc
					}
				}
				return false
			})
		}
		warning = strings.TrimPrefix(warning+"\nNo matching index found, create an index to optimize query time.", "\n")
	}
	if q.Skip >= len(docs) {
		docs = nil
	} else {
		docs = docs[q.Skip:]
	}
	if q.Limit >= 0 && q.Limit < len(docs) {
		docs = docs[:q.Limit]
	}
	res.Docs, res.Warning = docs, warning
	return res, nil
}

// Project keeps only the given fields of doc (all of them when fields is
// empty), as _find's `fields` asks.
func Project(doc map[string]any, fields []string) map[string]any {
	if len(fields) == 0 {
		return doc
	}
	out := map[string]any{}
	for _, f := range fields {
		path := SplitField(f)
		v, ok := Lookup(doc, path)
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
