package mango

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestIndex(t *testing.T) {
	x := NewIndex([]string{"n", "s"})
	docs := map[string]string{
		"a": `{"n":3,"s":"x"}`, "b": `{"n":1,"s":"y"}`, "c": `{"n":2,"s":"z"}`, "d": `{"n":2,"s":"a"}`,
		"e": `{"n":5}`, // lacks s: not indexed
		"f": `{"n":"str","s":"q"}`,
	}
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		var m map[string]any
		json.Unmarshal([]byte(docs[id]), &m)
		x.Put(id, m)
	}
	scan := func(sel string, desc bool) []string {
		s, err := Parse([]byte(sel))
		if err != nil {
			t.Fatal(err)
		}
		r, _ := s.FieldRange("n")
		var ids []string
		x.Scan(r, desc, func(id string) bool { ids = append(ids, id); return true })
		return ids
	}
	tests := []struct {
		sel  string
		desc bool
		want []string
	}{
		{`{"n":{"$gt":null}}`, false, []string{"b", "d", "c", "a", "f"}},
		{`{"n":2}`, false, []string{"d", "c"}},
		{`{"n":{"$gte":2,"$lt":3}}`, false, []string{"d", "c"}},
		{`{"n":{"$gt":1,"$lte":3}}`, true, []string{"a", "c", "d"}},
		{`{"$and":[{"n":{"$gt":2}},{"n":{"$lt":"a"}}]}`, false, []string{"a"}},
	}
	for _, tt := range tests {
		if got := scan(tt.sel, tt.desc); !slices.Equal(got, tt.want) {
			t.Errorf("%s desc=%v: %v, want %v", tt.sel, tt.desc, got, tt.want)
		}
	}
	x.Delete("d")
	var m map[string]any
	json.Unmarshal([]byte(`{"n":0,"s":"k"}`), &m)
	x.Put("c", m)
	if got := scan(`{"n":{"$lte":2}}`, false); !slices.Equal(got, []string{"c", "b"}) || x.Len() != 4 {
		t.Errorf("after Delete and a changed Put: %v (len %d)", got, x.Len())
	}
	s, _ := Parse([]byte(`{"m":1,"n":{"$exists":true}}`))
	if _, ok := s.FieldRange("n"); ok {
		t.Error("$exists bounds nothing")
	}
}
