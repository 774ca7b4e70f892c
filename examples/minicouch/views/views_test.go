package views

import (
	"reflect"
	"testing"
)

func rowsOf(kv ...any) []Row {
	var out []Row
	for i := 0; i < len(kv); i += 3 {
		out = append(out, Row{ID: kv[i].(string), Key: kv[i+1], Value: kv[i+2]})
	}
	return out
}

func ids(rows []Row) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// TestSelectRows: keys, ranges (with doc ids), direction, skip and limit
// over rows in collation order.
func TestSelectRows(t *testing.T) {
	rows := rowsOf("a", 1.0, nil, "b", 2.0, nil, "c", 2.0, nil, "d", "x", nil)
	tests := []struct {
		name string
		q    Query
		want []string
	}{
		{"all", Query{Limit: -1, InclusiveEnd: true}, []string{"a", "b", "c", "d"}},
		{"keys in their order", Query{Limit: -1, HasKeys: true, Keys: []any{"x", 2.0}}, []string{"d", "b", "c"}},
		{"keys descending", Query{Limit: -1, HasKeys: true, Keys: []any{2.0}, Descending: true}, []string{"c", "b"}},
		{"range", Query{Limit: -1, HasStart: true, Start: 2.0, HasEnd: true, End: 2.0, InclusiveEnd: true}, []string{"b", "c"}},
		{"range with start doc id", Query{Limit: -1, HasStart: true, Start: 2.0, StartDocID: "c", InclusiveEnd: true}, []string{"c", "d"}},
		{"exclusive end", Query{Limit: -1, HasEnd: true, End: 2.0}, []string{"a"}},
		{"descending range", Query{Limit: -1, Descending: true, HasStart: true, Start: 2.0, InclusiveEnd: true}, []string{"c", "b", "a"}},
		{"skip and limit", Query{Skip: 1, Limit: 2, InclusiveEnd: true}, []string{"b", "c"}},
		{"skip past the end", Query{Skip: 9, Limit: -1, InclusiveEnd: true}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ids(page(selectRows(rows, &tt.q), &tt.q)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%v, want %v", got, tt.want)
			}
		})
	}
}

// TestReduceBuiltins: the built-in reduce functions, grouped and not.
func TestReduceBuiltins(t *testing.T) {
	rows := rowsOf("a", []any{"x", 1.0}, 1.0, "b", []any{"x", 2.0}, 2.0, "c", []any{"y", 1.0}, 3.0)
	tests := []struct {
		fn   string
		q    Query
		want []Row
	}{
		{"_count", Query{}, []Row{{Key: nil, Value: 3}}},
		{"_sum", Query{}, []Row{{Key: nil, Value: 6.0}}},
		{"_count", Query{Group: true, GroupLevel: 1}, []Row{{Key: []any{"x"}, Value: 2}, {Key: []any{"y"}, Value: 1}}},
		{"_stats", Query{Group: true, GroupLevel: 1}, []Row{
			{Key: []any{"x"}, Value: map[string]float64{"sum": 3, "count": 2, "min": 1, "max": 2, "sumsqr": 5}},
			{Key: []any{"y"}, Value: map[string]float64{"sum": 3, "count": 1, "min": 3, "max": 3, "sumsqr": 9}},
		}},
		{"_approx_count_distinct", Query{}, []Row{{Key: nil, Value: 3}}},
	}
	for _, tt := range tests {
		got, err := reduceRows(nil, tt.fn, rows, &tt.q)
		if err != nil {
			t.Errorf("%s: %v", tt.fn, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %+v: %v, want %v", tt.fn, tt.q, got, tt.want)
		}
	}
}

// TestSumMixed: _sum of numbers and arrays of numbers, a number counting
// as [number], as CouchDB's sum_values/2 adds them.
func TestSumMixed(t *testing.T) {
	rows := rowsOf("a", "k", 1.0, "b", "k", 2.0, "c", "k", []any{3.0, 1.0}, "d", "k", 4.0, "e", "j", []any{})
	got, err := reduceRows(nil, "_sum", rows, &Query{Group: true})
	want := []Row{{Key: "k", Value: []any{10.0, 1.0}}, {Key: "j", Value: []any{0.0}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("%v (%v), want %v", got, err, want)
	}
}
