package selector

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// TestNormalizeSorted: the sorted normal form, as the replicator hashes
// it into a replication id.
func TestNormalizeSorted(t *testing.T) {
	tests := []struct{ in, out string }{
		{`{}`, `{}`},
		{`{"name":"x"}`, `{"name":{"$eq":"x"}}`},
		{`{"a":{"b":1}}`, `{"a.b":{"$eq":1}}`},
		{`{"type":"x","n":{"$gt":1}}`, `{"$and":[{"type":{"$eq":"x"}},{"n":{"$gt":1}}]}`},
		{`{"a":{"$gt":1,"$lt":5}}`, `{"$and":[{"a":{"$gt":1}},{"a":{"$lt":5}}]}`},
		{`{"$not":{"a":{"$gt":1}}}`, `{"a":{"$lte":1}}`},
		{`{"$not":{"$and":[{"a":1},{"b":{"$in":[1]}}]}}`, `{"$or":[{"a":{"$ne":1}},{"b":{"$nin":[1]}}]}`},
		{`{"$nor":[{"a":{"$exists":true}}]}`, `{"$and":[{"a":{"$exists":false}}]}`},
		{`{"a":{"$not":{"$regex":"x"}}}`, `{"a":{"$not":{"$regex":"x"}}}`},
		{`{"a":{"$regex":"^(?i)b[0-9]+\\.c$"}}`, `{"a":{"$regex":"^(?i)b[0-9]+\\.c$"}}`},
		{`{"a":{"$elemMatch":{"b":1,"c":2}}}`, `{"a":{"$elemMatch":{"$and":[{"b":{"$eq":1}},{"c":{"$eq":2}}]}}}`},
		{`{"a":{"z":1,"y":{"k":[{"q":1,"p":2}]}}}`, `{"$and":[{"a.z":{"$eq":1}},{"a.y.k":{"$eq":[{"p":2,"q":1}]}}]}`},
		{`{"$text":"hi"}`, `{"$default":{"$text":"hi"}}`},
		{`{"a":{"$mod":[2,1]},"b":{"$size":0}}`, `{"$and":[{"a":{"$mod":[2,1]}},{"b":{"$size":0}}]}`},
	}
	for _, tt := range tests {
		v, err := Normalize([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if got := string(jsonobj.AppendOrdered(nil, Sort(v))); got != tt.out {
			t.Errorf("%s -> %s, want %s", tt.in, got, tt.out)
		}
	}
	bad := map[string]string{
		`{"$and":{}}`:                    "bad argument for operator `$and`",
		`{"a":{"$exists":1}}`:            "bad argument for operator `$exists`",
		`{"a":{"$mod":[0,1]}}`:           "bad argument for operator `$mod`",
		`{"a":{"$size":-1}}`:             "bad argument for operator `$size`",
		`{"a":{"$elemMatch":1}}`:         "bad argument for operator `$elemMatch`",
		`{"a":{"$near":1}}`:              "operator `$near` is not supported",
		`{"a":{"$bogus":1}}`:             "unknown operator `$bogus`",
		`{"a":{"$default":{"$text":1}}}`: "invalid field",
		`{"a":{"$regex":"[z-a]"}}`:       "`$regex` \"[z-a]\" is not a valid regular expression: invalid character class range",
		`{"a":{"$regex":1}}`:             "bad argument for operator `$regex`",
		`{"a":{"$elemMatch":{"$regex":"` + strings.Repeat("(", 120) + `"}}}`: "`$regex` \"" + strings.Repeat("(", 100) + "…\" is not a valid regular expression: missing closing )",
	}
	for in, want := range bad {
		if _, err := Normalize([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", in, err, want)
		}
	}
}

// TestNormalizeKeepsOrder: unsorted, members stay in document order (what
// minicouch stores for a partial index), and Sort puts equal keys in
// reverse document order, as CouchDB's ejsort does.
func TestNormalizeKeepsOrder(t *testing.T) {
	tests := []struct{ in, unsorted, sorted string }{
		{`{"z":1,"a":{"$eq":{"q":1,"b":2}}}`, `{"$and":[{"z":{"$eq":1}},{"a":{"$eq":{"q":1,"b":2}}}]}`, `{"$and":[{"z":{"$eq":1}},{"a":{"$eq":{"b":2,"q":1}}}]}`},
		{`{"a":{"$eq":{"k":1,"k":2}}}`, `{"a":{"$eq":{"k":1,"k":2}}}`, `{"a":{"$eq":{"k":2,"k":1}}}`},
		{`{"$not":{"$and":[{"a":1},{"$not":{"b":2}}]}}`, `{"$or":[{"a":{"$ne":1}},{"b":{"$eq":2}}]}`, `{"$or":[{"a":{"$ne":1}},{"b":{"$eq":2}}]}`},
	}
	for _, tt := range tests {
		v, err := Normalize([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if got := string(jsonobj.AppendOrdered(nil, v)); got != tt.unsorted {
			t.Errorf("%s -> %s, want %s", tt.in, got, tt.unsorted)
		}
		if got := string(jsonobj.AppendOrdered(nil, Sort(v))); got != tt.sorted {
			t.Errorf("sorted %s -> %s, want %s", tt.in, got, tt.sorted)
		}
	}
}

// FuzzNormalize: any input is refused or normalised without a panic, and
// a normal form is a JSON object that normalises again.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"$not":{"$and":[{"a":1},{"$nor":[{"b":{"$in":[1]}}]}]}}`,
		`{"a":{"$elemMatch":{}}}`, `{"$text":"x"}`, `{"a":{"b":{"$regex":"^x","$exists":true}}}`, `{"k":1,"k":{"$gt":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := Normalize(raw)
		if err != nil {
			return
		}
		out := jsonobj.AppendOrdered(nil, v)
		if !json.Valid(out) || out[0] != '{' {
			t.Fatalf("%s: normal form %s is not a JSON object", raw, out)
		}
		if _, err := Normalize(out); err != nil {
			t.Fatalf("%s: normal form %s: %v", raw, out, err)
		}
		jsonobj.AppendOrdered(nil, Sort(v))
	})
}
