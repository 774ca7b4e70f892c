package replicate

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestDocsBody checks that the streamed _bulk_docs body is the request
// the docs make, read in any chunk size, that size is its length, that
// every open starts again, and that a detached body reads as ended.
func TestDocsBody(t *testing.T) {
	tests := []struct {
		name string
		docs []string
	}{
		{"no docs", nil},
		{"one", []string{`{"_id":"a","_rev":"1-x"}`}},
		{"three", []string{`{"_id":"a"}`, `{"_id":"b","v":[1,2]}`, `{"_id":"c","s":"` + strings.Repeat("z", 5000) + `"}`}},
		{"empty doc bytes", []string{`{}`, `{}`}},
	}
	for _, tc := range tests {
		docs := make([]json.RawMessage, len(tc.docs))
		for i, d := range tc.docs {
			docs[i] = json.RawMessage(d)
		}
		want := `{"new_edits":false,"docs":[` + strings.Join(tc.docs, ",") + `]}`
		b := &docsBody{docs: docs}
		if b.size() != int64(len(want)) {
			t.Errorf("%s: size %d, want %d", tc.name, b.size(), len(want))
		}
		for _, chunk := range []int{1, 3, 7, 4096} {
			rc, _ := b.open(context.Background())
			var got []byte
			p := make([]byte, chunk)
			for {
				n, err := rc.Read(p)
				got = append(got, p[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil || n == 0 {
					t.Fatalf("%s: Read = %d, %v", tc.name, n, err)
				}
			}
			if string(got) != want {
				t.Errorf("%s, chunks of %d: body %q, want %q", tc.name, chunk, got, want)
			}
			if !json.Valid(got) {
				t.Errorf("%s: body is not valid JSON", tc.name)
			}
		}
		rc, _ := b.open(context.Background())
		rc.Read(make([]byte, 5))
		b.detach()
		if n, err := rc.Read(make([]byte, 100)); n != 0 || err != io.EOF {
			t.Errorf("%s: read after detach = %d, %v; want 0, EOF", tc.name, n, err)
		}
	}
}
