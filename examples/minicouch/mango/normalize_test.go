package mango

import "testing"

// TestNormalize: selectors come out as CouchDB 3.5.0 stores them in a
// partial index's map (each read back from one).
func TestNormalize(t *testing.T) {
	tests := []struct{ sel, want string }{
		{`{"type":"x"}`, `{"type":{"$eq":"x"}}`},
		{`{"type":"x","a":{"b":1}}`, `{"$and":[{"type":{"$eq":"x"}},{"a.b":{"$eq":1}}]}`},
		{`{"$not":{"a":{"$gt":1}}}`, `{"a":{"$lte":1}}`},
		{`{"a":{"$gt":1,"$lt":5}}`, `{"$and":[{"a":{"$gt":1}},{"a":{"$lt":5}}]}`},
		{`{"$nor":[{"a":1},{"b":{"$in":[1,2]}}]}`, `{"$and":[{"a":{"$ne":1}},{"b":{"$nin":[1,2]}}]}`},
		{`{"a":{"$elemMatch":{"b":1,"c":{"$not":{"$eq":2}}}}}`, `{"a":{"$elemMatch":{"$and":[{"b":{"$eq":1}},{"$not":{"c":{"$eq":2}}}]}}}`},
		{`{"$or":[{"a":{"$exists":true}},{"b":{"c":{"$regex":"^x"}}}]}`, `{"$or":[{"a":{"$exists":true}},{"b.c":{"$regex":"^x"}}]}`},
		{`{"a":{"$not":{"$regex":"x"}}}`, `{"a":{"$not":{"$regex":"x"}}}`},
		{`{"a":[1,2],"b":{}}`, `{"$and":[{"a":{"$eq":[1,2]}},{"b":{"$eq":{}}}]}`},
		{`{"a":{"$and":[{"$gt":1},{"$lt":3}]}}`, `{"$and":[{"a":{"$gt":1}},{"a":{"$lt":3}}]}`},
		{`{"z":1,"a":{"$eq":{"q":1}}}`, `{"$and":[{"z":{"$eq":1}},{"a":{"$eq":{"q":1}}}]}`},
		{`{"$not":{"$and":[{"a":1},{"$not":{"b":2}}]}}`, `{"$or":[{"a":{"$ne":1}},{"b":{"$eq":2}}]}`},
		{`{"x.y":{"z":true},"n":null}`, `{"$and":[{"x.y.z":{"$eq":true}},{"n":{"$eq":null}}]}`},
		{`{}`, `{}`},
	}
	for _, tt := range tests {
		got, err := Normalize([]byte(tt.sel))
		if err != nil {
			t.Errorf("%s: %v", tt.sel, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%s: %s, want %s", tt.sel, got, tt.want)
		}
	}
	// refused by the compiler, or (accepted by it) by CouchDB's normaliser
	for _, sel := range []string{`{"a":{"$bogus":1}}`, `{"$gt":1}`, `{"a":{"$allMatch":1}}`} {
		if _, err := Normalize([]byte(sel)); err == nil {
			t.Errorf("%s normalized", sel)
		}
	}
}
