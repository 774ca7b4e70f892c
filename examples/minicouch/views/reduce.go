package views

import (
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/jsfilter"
	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// groupKey truncates a key to the query's group level.
func groupKey(k any, q *Query) any {
	if !q.Group {
		return nil
	}
	if arr, ok := k.([]any); ok && q.GroupLevel > 0 && len(arr) > q.GroupLevel {
		return arr[:q.GroupLevel]
	}
	return k
}

// reduceRows groups rows by key (per group/group_level) and reduces each
// group with a built-in or JavaScript reduce function.
func reduceRows(m *jsfilter.Mapper, fn string, rows []Row, q *Query) ([]Row, error) {
	var out []Row
	for i := 0; i < len(rows); {
		gk := groupKey(rows[i].Key, q)
		j := i
		for j < len(rows) && mango.Compare(groupKey(rows[j].Key, q), gk) == 0 {
			j++
		}
		val, err := reduceGroup(m, fn, rows[i:j])
		if err != nil {
			return nil, err
		}
		out = append(out, Row{Key: gk, Value: val})
		i = j
	}
	return out, nil
}
func reduceGroup(m *jsfilter.Mapper, fn string, rows []Row) (any, error) {
	switch strings.TrimSpace(fn) {
	case "_count":
		return len(rows), nil
	case "_sum":
		var total any = 0.0
		for _, r := range rows {
			total = addValues(total, r.Value)
		}
		return total, nil
	case "_stats":
		st := map[string]float64{"sum": 0, "count": 0, "min": 0, "max": 0, "sumsqr": 0}
		for i, r := range rows {
			f, _ := r.Value.(float64)
			st["sum"] += f
			st["count"]++
			st["sumsqr"] += f * f
			if i == 0 || f < st["min"] {
				st["min"] = f
			}
			if i == 0 || f > st["max"] {
				st["max"] = f
			}
		}
		return st, nil
	case "_approx_count_distinct":
		seen := map[string]bool{}
		for _, r := range rows {
			b, _ := jsonobj.Marshal(r.Key)
			seen[string(b)] = true
		}
		return len(seen), nil
	}
	keys := make([][2]any, len(rows))
	values := make([]any, len(rows))
	for i, r := range rows {
		keys[i] = [2]any{r.Key, r.ID}
		values[i] = r.Value
	}
	return m.Reduce(fn, keys, values, false)
}

// addValues is _sum's addition: numbers, or arrays of numbers elementwise,
// a number with an array being the array [number], as in CouchDB's
// couch_query_servers:sum_values/2 (whose sum starts at 0 too).
func addValues(a, b any) any {
	af, aok := a.(float64)
	bf, bok := b.(float64)
	if aok && bok {
		return af + bf
	}
	al, _ := a.([]any)
	if aok {
		al = []any{af}
	}
	bl, _ := b.([]any)
	if !bok && bl == nil {
		return a
	}
	if bok {
		bl = []any{bf}
	}
	out := make([]any, max(len(al), len(bl)))
	for i := range out {
		var x, y float64
		if i < len(al) {
			x, _ = al[i].(float64)
		}
		if i < len(bl) {
			y, _ = bl[i].(float64)
		}
		out[i] = x + y
	}
	return out
}
