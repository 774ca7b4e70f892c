// Package views is minicouch's view engine: a design doc's JavaScript map
// function (and built-in or JavaScript reduce) run over a database at
// query time, the rows collated, selected and paged as CouchDB's view
// queries ask. minicouch keeps no view index: every query maps every doc.
package views

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/jsfilter"
	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/hashicorp/go-hclog"
)

// Row is one row of a view: the emitted key and value of a doc (ID empty
// in reduced rows), and the doc when include_docs asks for it.
type Row struct {
	ID    string `json:"id,omitempty"`
	Key   any    `json:"key"`
	Value any    `json:"value"`
	Doc   any    `json:"doc,omitempty"`
}

// Query is what a view request asks for, its parameters read.
type Query struct {
	Keys                 []any
	HasKeys              bool
	Start, End           any
	HasStart, HasEnd     bool
	StartDocID, EndDocID string
	InclusiveEnd         bool
	Descending           bool
	Skip                 int
	Limit                int   // negative: no limit
	IncludeDocs          bool  // refused with a reduce
	Reduce               *bool // nil: reduce when the view has a reduce function
	Group                bool
	GroupLevel           int // -1 = exact (group=true), 0 = none
}

// View is a compiled view of a design doc.
type View struct {
	mapper *jsfilter.Mapper
	reduce string // the reduce function; "" when none
}

// Open reads view name of design doc ddoc (without "_design/") from db
// and compiles its map function.
func Open(ctx context.Context, db *store.DB, ddoc, name string) (*View, error) {
	dd, err := db.Get(ctx, store.DesignPrefix+ddoc, store.GetOptions{})
	if err != nil {
		return nil, err
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
		return nil, &hooks.Error{Status: 404, Err: "not_found", Reason: "missing_named_view"}
	}
	mapper, err := jsfilter.NewMapper(vd.Map)
	if err != nil {
		return nil, &hooks.Error{Status: 400, Err: "compilation_error", Reason: err.Error()}
	}
	return &View{mapper: mapper, reduce: vd.Reduce}, nil
}

// Result is the answer to a view query.
type Result struct {
	Rows      []Row // selected and paged; never nil
	Reduced   bool  // Rows are reduced groups (no total_rows, no offset)
	TotalRows int
	Offset    int
	Seq       uint64 // the rows reflect at least this update seq
}

// Run maps every doc of db (design docs but) and answers q. A doc the
// map function fails on is left out and logged at debug level.
func (v *View) Run(ctx context.Context, db *store.DB, q *Query, log hclog.Logger) (Result, error) {
	var rows []Row
	res := Result{Seq: db.UpdateSeq()}
	_, err := db.AllDocs(ctx, store.AllDocsOptions{}, func(r store.AllDocsRow) error {
		if strings.HasPrefix(r.ID, store.DesignPrefix) {
			return nil
		}
		doc, err := db.Get(ctx, r.ID, store.GetOptions{Conflicts: true})
		if err != nil {
			return nil
		}
		b, _ := doc.MarshalJSON()
		emits, err := v.mapper.Map(b)
		if err != nil {
			log.Debug("map function failed on doc", "id", r.ID, "error", err)
			return nil
		}
		for _, e := range emits {
			rows = append(rows, Row{ID: r.ID, Key: e.Key, Value: e.Value})
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	sort.SliceStable(rows, func(i, j int) bool { return cmpRow(rows[i], rows[j]) < 0 })
	res.TotalRows = len(rows)
	selected := selectRows(rows, q)
	reduce := v.reduce != "" && (q.Reduce == nil || *q.Reduce)
	if q.Reduce != nil && *q.Reduce && v.reduce == "" {
		return res, &hooks.Error{Status: 400, Err: "query_parse_error", Reason: "Reduce is invalid for map-only views."}
	}
	if reduce {
		if q.IncludeDocs {
			return res, &hooks.Error{Status: 400, Err: "query_parse_error", Reason: "`include_docs` is invalid for reduce"}
		}
		out, err := reduceRows(v.mapper, v.reduce, selected, q)
		if err != nil {
			return res, &hooks.Error{Status: 500, Err: "os_process_error", Reason: err.Error()}
		}
		out = page(out, q)
		for i := range out {
			out[i].ID = ""
		}
		res.Rows, res.Reduced = out, true
		return res, nil
	}
	if len(selected) > 0 && !q.HasKeys {
		for i, r := range rows {
			if r.ID == selected[0].ID && mango.Compare(r.Key, selected[0].Key) == 0 {
				res.Offset = i
				if q.Descending {
					res.Offset = res.TotalRows - 1 - i
				}
				break
			}
		}
	}
	res.Rows = page(selected, q)
	return res, nil
}

// cmpRow orders view rows by key (CouchDB collation), then doc id.
func cmpRow(a, b Row) int {
	if c := mango.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// selectRows applies keys, ranges and direction to sorted rows.
func selectRows(rows []Row, q *Query) []Row {
	if q.HasKeys {
		var out []Row
		for _, k := range q.Keys {
			matched := []Row{}
			for _, r := range rows {
				if mango.Compare(r.Key, k) == 0 {
					matched = append(matched, r)
				}
			}
			if q.Descending {
				for i, j := 0, len(matched)-1; i < j; i, j = i+1, j-1 {
					matched[i], matched[j] = matched[j], matched[i]
				}
			}
			out = append(out, matched...)
		}
		return out
	}
	ordered := rows
	if q.Descending {
		ordered = make([]Row, len(rows))
		for i, r := range rows {
			ordered[len(rows)-1-i] = r
		}
	}
	var out []Row
	for _, r := range ordered {
		if q.HasStart {
			c := mango.Compare(r.Key, q.Start)
			if c == 0 && q.StartDocID != "" {
				c = strings.Compare(r.ID, q.StartDocID)
			}
			if (!q.Descending && c < 0) || (q.Descending && c > 0) {
				continue
			}
		}
		if q.HasEnd {
			c := mango.Compare(r.Key, q.End)
			if c == 0 && q.EndDocID != "" {
				c = strings.Compare(r.ID, q.EndDocID)
			}
			if (!q.Descending && (c > 0 || (c == 0 && !q.InclusiveEnd))) ||
				(q.Descending && (c < 0 || (c == 0 && !q.InclusiveEnd))) {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// page applies skip and limit.
func page(rows []Row, q *Query) []Row {
	if q.Skip > 0 {
		if q.Skip >= len(rows) {
			return []Row{}
		}
		rows = rows[q.Skip:]
	}
	if q.Limit >= 0 && q.Limit < len(rows) {
		rows = rows[:q.Limit]
	}
	if rows == nil {
		rows = []Row{}
	}
	return rows
}
