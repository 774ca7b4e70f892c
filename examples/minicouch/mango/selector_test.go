package mango

import (
	"encoding/json"
	"slices"
	"testing"
)

const testDoc = `{"_id":"a","name":"Alice","age":30,"tags":["x","y"],"addr":{"city":"Paris","zip":"75001"},
"n":null,"ok":true,"scores":[1,5,9],"pets":[{"kind":"cat","age":3},{"kind":"dog","age":5}],"dot.key":1,"map":{"k1":1,"zz":2}}`

func TestMatch(t *testing.T) {
	var doc any
	if err := json.Unmarshal([]byte(testDoc), &doc); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sel  string
		want bool
	}{
		{`{}`, true},
		{`{"name":"Alice"}`, true},
		{`{"name":"Bob"}`, false},
		{`{"age":{"$gt":29,"$lt":31}}`, true},
		{`{"age":{"$gte":31}}`, false},
		{`{"age":{"$lte":30}}`, true},
		{`{"age":{"$ne":30}}`, false},
		{`{"missing":{"$ne":30}}`, false},
		{`{"missing":{"$not":{"$eq":30}}}`, true},
		{`{"missing":{"$exists":false}}`, true},
		{`{"name":{"$exists":true}}`, true},
		{`{"addr.city":"Paris"}`, true},
		{`{"addr":{"city":"Paris"}}`, true},
		{`{"addr":{"city":{"$regex":"^Pa"}}}`, true},
		{`{"dot\\.key":1}`, true},
		{`{"n":{"$type":"null"}}`, true},
		{`{"tags":{"$type":"array"}}`, true},
		{`{"age":{"$type":"string"}}`, false},
		{`{"age":{"$in":[1,30]}}`, true},
		{`{"tags":{"$in":["y","z"]}}`, true},
		{`{"age":{"$nin":[1,30]}}`, false},
		{`{"tags":{"$nin":["z"]}}`, true},
		{`{"tags":{"$all":["y","x"]}}`, true},
		{`{"tags":{"$all":["x","q"]}}`, false},
		{`{"tags":{"$size":2}}`, true},
		{`{"age":{"$mod":[7,2]}}`, true},
		{`{"age":{"$mod":[7,3]}}`, false},
		{`{"$or":[{"name":"Bob"},{"age":30}]}`, true},
		{`{"$and":[{"name":"Alice"},{"age":31}]}`, false},
		{`{"$nor":[{"name":"Bob"},{"age":31}]}`, true},
		{`{"$not":{"name":"Alice"}}`, false},
		{`{"scores":{"$elemMatch":{"$gt":8}}}`, true},
		{`{"pets":{"$elemMatch":{"kind":"dog","age":{"$gt":4}}}}`, true},
		{`{"pets":{"$elemMatch":{"kind":"dog","age":{"$gt":6}}}}`, false},
		{`{"scores":{"$allMatch":{"$gt":0}}}`, true},
		{`{"scores":{"$allMatch":{"$gt":1}}}`, false},
		{`{"map":{"$keyMapMatch":{"$eq":"zz"}}}`, true},
		{`{"map":{"$keyMapMatch":{"$eq":"nope"}}}`, false},
		{`{"ok":true}`, true},
		{`{"ok":{"$gt":false}}`, true},
		{`{"name":{"$gt":100}}`, true},
		{`{"name":{"$lt":["a"]}}`, true},
		{`{"name":{"$beginsWith":"Al"}}`, true},
		{`{"tags":["x","y"]}`, true},
		{`{"tags":"x"}`, false},
	}
	for _, tc := range tests {
		s, err := Parse([]byte(tc.sel))
		if err != nil {
			t.Errorf("%s: %v", tc.sel, err)
			continue
		}
		if got := s.Match(doc); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.sel, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, sel := range []string{
		`[]`, `{"a":{"$bogus":1}}`, `{"a":{"$exists":1}}`, `{"a":{"$in":1}}`,
		`{"a":{"$mod":[0,1]}}`, `{"a":{"$regex":"("}}`, `{"a":{"$type":"int"}}`,
		`{"$or":[]}`, `{"a":{"$size":-1}}`, `not json`,
	} {
		if _, err := Parse([]byte(sel)); err == nil {
			t.Errorf("%s: want error", sel)
		}
	}
}

func TestCompare(t *testing.T) {
	order := []string{`null`, `false`, `true`, `1`, `2`, `"a"`, `"A"`, `"aa"`, `"b"`, `["a"]`, `["b"]`, `{"a":1}`, `{"b":1}`}
	for i := 0; i+1 < len(order); i++ {
		var a, b any
		json.Unmarshal([]byte(order[i]), &a)
		json.Unmarshal([]byte(order[i+1]), &b)
		if Compare(a, b) != -1 || Compare(b, a) != 1 || Compare(a, a) != 0 {
			t.Errorf("order %s < %s broken", order[i], order[i+1])
		}
	}
}

// TestMatchIDRaw: as CouchDB 3.5.0 answers them, conditions on _id compare
// in Erlang's term order (numbers < false < null < true < objects <
// arrays < strings, strings byte by byte), everything else by collation.
func TestMatchIDRaw(t *testing.T) {
	tests := []struct {
		sel, doc string
		want     bool
	}{
		{`{"_id":{"$gt":{}}}`, `{"_id":"a"}`, true},
		{`{"_id":{"$lt":{}}}`, `{"_id":"a"}`, false},
		{`{"_id":{"$gte":{}}}`, `{"_id":"a"}`, true},
		{`{"_id":{"$lte":[]}}`, `{"_id":"a"}`, false},
		{`{"_id":{"$gt":["z"]}}`, `{"_id":"a"}`, true},
		{`{"_id":{"$gt":null}}`, `{"_id":"a"}`, true},
		{`{"_id":{"$lt":false}}`, `{"_id":"a"}`, false},
		{`{"_id":{"$gt":10}}`, `{"_id":"a"}`, true},
		{`{"_id":{"$lt":"a"}}`, `{"_id":"B"}`, true}, // bytes: "B" < "a"
		{`{"_id":{"$gt":"a","$lt":{}}}`, `{"_id":"b"}`, false},
		{`{"_id":{"$not":{"$lt":{}}}}`, `{"_id":"a"}`, true},
		{`{"$or":[{"_id":{"$gt":{}}},{"x":1}]}`, `{"_id":"a"}`, true},
		{`{"_id":{"$in":["A"]}}`, `{"_id":"a"}`, false},
		// other fields keep collation: strings < arrays < objects, a < B
		{`{"x":{"$lt":{}}}`, `{"_id":"a","x":"b"}`, true},
		{`{"x":{"$gt":{}}}`, `{"_id":"a","x":"b"}`, false},
		{`{"x":{"$lt":"a"}}`, `{"_id":"a","x":"B"}`, false},
		// a nested _id is another field; in $elemMatch a field starts anew
		{`{"x":{"_id":{"$lt":{}}}}`, `{"x":{"_id":"a"}}`, true},
		{`{"x._id":{"$lt":{}}}`, `{"x":{"_id":"a"}}`, true},
		{`{"x":{"$elemMatch":{"_id":{"$gt":{}}}}}`, `{"x":[{"_id":"a"}]}`, true},
	}
	for _, tt := range tests {
		s, err := Parse([]byte(tt.sel))
		if err != nil {
			t.Fatalf("%s: %v", tt.sel, err)
		}
		var doc any
		if err := json.Unmarshal([]byte(tt.doc), &doc); err != nil {
			t.Fatal(err)
		}
		if got := s.Match(doc); got != tt.want {
			t.Errorf("%s on %s: %v, want %v", tt.sel, tt.doc, got, tt.want)
		}
	}
}

// TestSplitField: field names split as CouchDB's mango_util:parse_field:
// at dots a backslash does not precede, then without backslashes.
func TestSplitField(t *testing.T) {
	tests := []struct {
		field string
		want  []string
	}{
		{`a`, []string{"a"}},
		{`a.b.c`, []string{"a", "b", "c"}},
		{`a\.b`, []string{"a.b"}},
		{`a.b\.c`, []string{"a", "b.c"}},
		{`\$foobar`, []string{"$foobar"}},
		{`a\b`, []string{"ab"}},
		{`really.deeply.nested.escaped\.field`, []string{"really", "deeply", "nested", "escaped.field"}},
	}
	for _, tt := range tests {
		if got := SplitField(tt.field); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.field, got, tt.want)
		}
	}
	s, err := Parse([]byte(`{"\\$foobar":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Match(map[string]any{"$foobar": "a"}) {
		t.Error(`{"\\$foobar":"a"} does not match the field $foobar`)
	}
}
