package mango

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/examples/minicouch/store"
)

// Mango json indexes are stored as CouchDB stores them: a view of a design
// doc with "language": "query". minicouch keeps each index in memory
// (Index), built on its first use and brought up to date from the
// changes feed at every query that uses it, as CouchDB updates its
// indexes; a restart rebuilds them.

// Indexes holds the built json indexes of every database of a store, by
// database uuid and index definition. The zero value is ready to use.
type Indexes struct {
	mu    sync.Mutex
	built map[string]*builtIndex
}

// builtIndex is an index's in-memory state: the ids by key, as of seq.
type builtIndex struct {
	mu      sync.Mutex
	idx     *Index
	partial *Selector
	seq     uint64
}

// builtFor returns the built state of def in db, made on first use.
func (m *Indexes) builtFor(db *store.DB, def IndexDef) (*builtIndex, error) {
	key := db.UUID() + "\x00" + def.DDoc + "\x00" + def.Name + "\x00" + strings.Join(def.Fields, "\x00") + "\x00" + string(def.Partial)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.built == nil {
		m.built = map[string]*builtIndex{}
	}
	if b := m.built[key]; b != nil {
		return b, nil
	}
	b := &builtIndex{idx: NewIndex(def.Fields)}
	if def.Partial != nil {
		sel, err := Parse(def.Partial)
		if err != nil {
			return nil, err
		}
		b.partial = sel
	}
	m.built[key] = b
	return b, nil
}

// catchUp brings b up to db's current seq from its changes feed; the
// caller holds b.mu.
func (b *builtIndex) catchUp(ctx context.Context, db *store.DB) error {
	_, err := db.Changes(ctx, store.ChangesOptions{Since: b.seq}, func(ch store.Change) error {
		b.seq = ch.Seq
		if strings.HasPrefix(ch.ID, store.DesignPrefix) {
			return nil
		}
		doc, err := db.Get(ctx, ch.ID, store.GetOptions{})
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

// ReadIndexDefs reads the json indexes of db from its design docs, sorted
// by design doc and name.
func ReadIndexDefs(ctx context.Context, db *store.DB) ([]IndexDef, error) {
	start, end := store.DesignPrefix, "_design0"
	var defs []IndexDef
	_, err := db.AllDocs(ctx, store.AllDocsOptions{StartKey: &start, EndKey: &end}, func(r store.AllDocsRow) error {
		doc, err := db.Get(ctx, r.ID, store.GetOptions{})
		if err != nil {
			return nil
		}
		defs = append(defs, IndexesOf(r.ID, doc.Body)...)
		return nil
	})
	sort.Slice(defs, func(i, j int) bool {
		return defs[i].DDoc < defs[j].DDoc || defs[i].DDoc == defs[j].DDoc && defs[i].Name < defs[j].Name
	})
	return defs, err
}
