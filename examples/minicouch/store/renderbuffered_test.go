package store

import (
	"bufio"
	"bytes"
	"context"
	"testing"
)

// TestWriteDocJSONIntoBufferedWriter checks that rendering into a caller's
// bufio.Writer (left unflushed) gives the same bytes as into a plain
// writer, also when attachment data is streamed through the buffer and
// when the doc is larger than the buffer.
func TestWriteDocJSONIntoBufferedWriter(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "render")
	ctx := context.Background()
	big := bytes.Repeat([]byte("y"), 5000)
	put(t, db, `{"_id":"a","v":"x","_attachments":{"f.txt":{"content_type":"text/plain","data":"aGVsbG8gd29ybGQ="}}}`)
	put(t, db, `{"_id":"b","big":"`+string(big)+`"}`)
	for _, id := range []string{"a", "b"} {
		for _, size := range []int{16, 64 << 10} {
			d, err := db.Get(ctx, id, GetOptions{Attachments: true, Revs: true})
			if err != nil {
				t.Fatal(err)
			}
			var plain bytes.Buffer
			if err := db.WriteDocJSON(ctx, &plain, d, false); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			bw := bufio.NewWriterSize(&out, size)
			bw.WriteString("[")
			for i := 0; i < 3; i++ {
				if err := db.WriteDocJSON(ctx, bw, d, false); err != nil {
					t.Fatal(err)
				}
			}
			bw.WriteString("]")
			bw.Flush()
			want := "[" + plain.String() + plain.String() + plain.String() + "]"
			if out.String() != want {
				t.Errorf("%s, buffer %d: got %s\nwant %s", id, size, out.String(), want)
			}
		}
	}
}
