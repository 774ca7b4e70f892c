package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestCompactValid(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a":1}`, `{"a":1}`},
		{" { \"a\" : [ 1 , \"x y\" ] }\n", `{"a":[1,"x y"]}`},
		{`{"s":"q\" \\ ","t" : "\\\\"}`, `{"s":"q\" \\ ","t":"\\\\"}`},
		{"{\"a\":\t{\r\n}}", `{"a":{}}`},
	}
	for _, tc := range tests {
		if got := compactValid([]byte(tc.in)); string(got) != tc.want {
			t.Errorf("compactValid(%q) = %q, want %q", tc.in, got, tc.want)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(tc.in)); err != nil || buf.String() != tc.want {
			t.Errorf("test case disagrees with json.Compact: %q %v", buf.String(), err)
		}
	}
}

// TestParseValidDocMatchesParseDoc checks that skipping validation changes nothing for valid bodies.
func TestParseValidDocMatchesParseDoc(t *testing.T) {
	bodies := []string{
		`{"_id":"a","_revisions":{"start":2,"ids":["x","y"]},"v":"a b","n":[1, 2]}`,
		" {\n \"_id\" : \"b\\u0041\" , \"_rev\":\"1-abc\", \"_deleted\" : true }",
		`{"_id":"c","_revisions":{"ids":["p\"q"],"start":1}}`,
		`{"_id":"d","_revisions":{"start":1.5,"ids":["p"]}}`,
		`{"_id":"e","_revisions":{"start":2,"ids":["a","b"],"start":null}}`,
		`{"_id":"f","_revisions":{"start":3,"ids":[]}}`,
		`{"_id":"g","_attachments":{"x.txt":{"content_type":"text/plain","data":"aGk="}}}`,
		`{"_id":"h","_bogus":1}`,
	}
	for _, b := range bodies {
		want, werr := ParseDoc([]byte(b))
		got, gerr := ParseValidDoc([]byte(b))
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gerr, werr) {
			t.Errorf("%s: ParseValidDoc = %+v, %v; ParseDoc = %+v, %v", b, got, gerr, want, werr)
		}
	}
	if _, err := ParseDoc([]byte(`{"_id":"a",}`)); err == nil {
		t.Error("ParseDoc accepted invalid JSON")
	}
}
