package replicate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestFeedScanner(t *testing.T) {
	long := strings.Repeat("x", 70000)
	tests := []struct {
		name string
		feed string
		err  bool
	}{
		{name: "couchdb layout", feed: "{\"results\":[\n{\"seq\":\"1-g1AAAA\",\"id\":\"a\",\"changes\":[{\"rev\":\"1-x\"}]},\n" +
			"{\"seq\":\"2-g1\",\"id\":\"b\\\"q\",\"changes\":[{\"rev\":\"2-y\"},{\"rev\":\"1-z\"}],\"deleted\":true}\n],\n\"last_seq\":\"2-g1\",\"pending\":0}\n"},
		{name: "numeric seqs, members in any order", feed: `{"last_seq":7,"results":[{"changes":[{"rev":"1-a"}],"id":"x","seq":7,"doc":{"s":"]}"}}],"pending":3}`},
		{name: "empty results", feed: `{"results":[],"last_seq":0}`},
		{name: "empty object", feed: `{}`},
		{name: "long id", feed: `{"results":[{"seq":1,"id":"` + long + `","changes":[{"rev":"1-a"}]}],"last_seq":1}`},
		{name: "truncated in a row", feed: `{"results":[{"seq":1,"id":"a","changes":[{"rev":"1-a"}]},{"seq":2,"id":"b"`, err: true},
		{name: "truncated after results", feed: `{"results":[{"seq":1,"id":"a","changes":[]}]`, err: true},
		{name: "row not an object", feed: `{"results":[1]}`, err: true},
		{name: "missing comma", feed: `{"results":[{"seq":1} {"seq":2}]}`, err: true},
		{name: "not an object", feed: `[]`, err: true},
		{name: "empty", feed: ``, err: true},
	}
	for _, tc := range tests {
		for _, oneByte := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				var rd = bytes.NewReader([]byte(tc.feed))
				f := &feedScanner{r: rd}
				if oneByte {
					f.r = iotest.OneByteReader(rd)
				}
				var got []change
				err := f.rows(func(c change) error { got = append(got, c); return nil })
				if (err != nil) != tc.err {
					t.Fatalf("err = %v, want error %v", err, tc.err)
				}
				if tc.err {
					return
				}
				var want struct {
					Results []change `json:"results"`
				}
				if err := json.Unmarshal([]byte(tc.feed), &want); err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want.Results) {
					t.Fatalf("%d rows, encoding/json %d", len(got), len(want.Results))
				}
				for i := range got {
					if len(got[i].Changes) == 0 && len(want.Results[i].Changes) == 0 {
						got[i].Changes, want.Results[i].Changes = nil, nil
					}
					if !reflect.DeepEqual(got[i], want.Results[i]) {
						t.Errorf("row %d: %+v, encoding/json %+v", i, got[i], want.Results[i])
					}
				}
			})
		}
	}
}
