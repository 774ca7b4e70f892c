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

// TestParseValidDocKeys checks how member keys are told apart without
// decoding them: escapes that spell a special member name count as that
// member, other keys stay in the body as written.
func TestParseValidDocKeys(t *testing.T) {
	tests := []struct {
		name, in string
		id, rev  string
		revs     *Revisions
		body     string
		err      string
	}{
		{name: "plain", in: `{"_id":"a","_rev":"1-x","v":1}`, id: "a", rev: "1-x", body: `{"v":1}`},
		{name: "escaped _id", in: `{"\u005fid":"a","v":1}`, id: "a", body: `{"v":1}`},
		{name: "escape inside _rev", in: `{"_id":"a","_r\u0065v":"2-y"}`, id: "a", rev: "2-y", body: `{}`},
		{name: "escaped ordinary key stays raw", in: `{"_id":"a","\u0041b":1,"":2}`, id: "a", body: `{"\u0041b":1,"":2}`},
		{name: "replication member kept", in: `{"_id":"a","_replication_state":"completed"}`, id: "a", body: `{"_replication_state":"completed"}`},
		{name: "escaped revisions keys", in: `{"_id":"a","_revisions":{"st\u0061rt":2,"ids":["b","a"]}}`, id: "a", rev: "2-b",
			revs: &Revisions{Start: 2, IDs: []string{"b", "a"}}, body: `{}`},
		{name: "unknown special", in: `{"_id":"a","_b\u006fgus":1}`, err: "Bad special document member: _bogus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseValidDoc([]byte(tc.in))
			if tc.err != "" {
				if err == nil || err.(*Error).Reason != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.ID != tc.id || d.Rev != tc.rev || string(d.Body) != tc.body || !reflect.DeepEqual(d.Revisions, tc.revs) {
				t.Fatalf("got id %q rev %q revisions %+v body %s", d.ID, d.Rev, d.Revisions, d.Body)
			}
		})
	}
}

// TestParseValidDocInPlace checks that building the body over the input's
// own bytes parses every shape as the copying parser does, and that the
// body cannot be appended into the bytes that followed the document.
func TestParseValidDocInPlace(t *testing.T) {
	tests := []struct{ name, in string }{
		{"plain", `{"_id":"a","_rev":"1-x","n":1,"pad":"xxxx","tags":["a","b"]}`},
		{"replicated", `{"_id":"d0000001","_rev":"1-abc","n":1,"pad":"xx","tags":["bench"],"_revisions":{"start":1,"ids":["abc"]}}`},
		{"special members between", `{"a":1,"_id":"b","c":{"d":2},"_deleted":true,"e":"f"}`},
		{"whitespace everywhere", " {\n \"_id\" : \"c\" ,\t\"x\" : [ 1 , { \"y\" : \"a b\" } ] , \"z\" : \"s p\" }\n"},
		{"nested whitespace only", `{"o":{ "k" : [ ] },"s":" "}`},
		{"escaped keys", `{"\u005fid":"e","k\"ey":1,"_rev":"1-a"}`},
		{"replication members", `{"_id":"r","_replication_state":"completed","x":1}`},
		{"attachments", `{"_id":"g","_attachments":{"x.txt":{"content_type":"text/plain","data":"aGk="}},"v":2}`},
		{"empty", `{}`},
		{"empty with space", ` { } `},
		{"bad member", `{"x":1,"_bogus":1}`},
		{"bad id", `{"_id":"_nope"}`},
		{"array", `[{"_id":"a"}]`},
		{"string", `"{"`},
		{"leading space array", `  [1]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := ParseValidDoc([]byte(tc.in))
			// The document sits inside a larger buffer, as in a _bulk_docs body.
			buf := []byte(tc.in + `,{"next":"doc"}`)
			got, gerr := ParseValidDocInPlace(buf[:len(tc.in)])
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gerr, werr) {
				t.Fatalf("ParseValidDocInPlace = %+v, %v; ParseValidDoc = %+v, %v", got, gerr, want, werr)
			}
			if string(buf[len(tc.in):]) != `,{"next":"doc"}` {
				t.Errorf("bytes after the document changed: %q", buf[len(tc.in):])
			}
			if got != nil && cap(got.Body) != len(got.Body) {
				t.Errorf("body cap %d, len %d: appending would overwrite the next document", cap(got.Body), len(got.Body))
			}
		})
	}
}
