package store

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseDoc feeds arbitrary bodies to ParseDoc: it never panics, errors
// are CouchDB-shaped, and an accepted body keeps exactly the members that
// do not start with "_", as valid JSON.
func FuzzParseDoc(f *testing.F) {
	for _, s := range []string{
		`{"_id":"a","_rev":"1-abc","x":[1,{"y":"z"}],"_attachments":{"f":{"data":"aGk="}}}`,
		`{"_id":"_local/x","_deleted":true}`,
		`{"a":"\"}","b":{"c":"]"}}`,
		`{"_revisions":{"start":2,"ids":["b","a"]}}`,
		`[]`, `{`, `{"_bad":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := ParseDoc(raw)
		if json.Valid(raw) {
			// Building the body in place parses exactly the same.
			in, ierr := ParseValidDocInPlace(append([]byte(nil), raw...))
			if !reflect.DeepEqual(in, d) || !reflect.DeepEqual(ierr, err) {
				t.Fatalf("ParseValidDocInPlace = %+v, %v; ParseDoc = %+v, %v", in, ierr, d, err)
			}
		}
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
			return
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(d.Body, &body); err != nil {
			t.Fatalf("body %q is not a JSON object: %v", d.Body, err)
		}
		var all map[string]json.RawMessage
		json.Unmarshal(raw, &all)
		for k := range body {
			if strings.HasPrefix(k, "_") {
				t.Fatalf("special member %q kept in body", k)
			}
		}
		for k := range all {
			if !strings.HasPrefix(k, "_") {
				if _, ok := body[k]; !ok {
					t.Fatalf("member %q dropped", k)
				}
			}
		}
	})
}
