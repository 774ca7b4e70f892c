package jobdata

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// TestRecordFormat (issue 39 item 5): every record says its format first;
// a record of a newer format is refused by Decode before anything else of
// it is read, is shown from its Partial record, and a Partial record is
// never encoded back.
func TestRecordFormat(t *testing.T) {
	rec := New(&parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, Target: parse.Endpoint{URL: "http://127.0.0.1:1/b/"}}, "_replicator", "u", "d1", time.Unix(5, 0))
	rec.Node, rec.RepID = "n1", "abc+continuous"
	data := rec.Encode(testKeys, "job1")
	if !bytes.HasPrefix(data, []byte(`{"format":`+strconv.Itoa(Format)+`,`)) {
		t.Fatalf("format not first: %.60s", data)
	}
	newer := bytes.Replace(data, []byte(`"format":`+strconv.Itoa(Format)), []byte(`"format":`+strconv.Itoa(Format+1)), 1)
	newer = bytes.Replace(newer, []byte(`"sealed_endpoints":"s2.`), []byte(`"sealed_endpoints":"s9.`), 1)
	for _, tc := range []struct {
		name       string
		data       []byte
		wantFormat int
		wantNewer  bool
	}{
		{"this version's", data, Format, false},
		{"before formats", bytes.Replace(data, []byte(`"format":`+strconv.Itoa(Format)+`,`), nil, 1), 0, false},
		{"a newer version's", newer, Format + 1, true},
		{"a newer version's, format not first", append(bytes.TrimSuffix(bytes.Replace(newer, []byte(`"format":`+strconv.Itoa(Format+1)+`,`), nil, 1), []byte("}")), []byte(`,"format":`+strconv.Itoa(Format+1)+`}`)...), Format + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatOf(tc.data); got != tc.wantFormat {
				t.Fatalf("FormatOf: %d, want %d", got, tc.wantFormat)
			}
			got, err := Decode(tc.data, testKeys, "job1")
			var nf *NewerFormatError
			if tc.wantNewer != errors.As(err, &nf) || tc.wantNewer && (nf.Format != Format+1 || !errors.Is(err, ErrNewerFormat)) {
				t.Fatalf("Decode: %v", err)
			}
			if !tc.wantNewer {
				if err != nil || got.Rep.Source.URL != "http://127.0.0.1:1/a/" {
					t.Fatalf("Decode: %+v %v", got, err)
				}
				return
			}
			p := Partial(tc.data)
			if !p.IsPartial() || p.Rep != nil || p.DocID != "d1" || p.Node != "n1" || p.RepID != "abc+continuous" || len(p.History) != 1 || p.State != Pending {
				t.Fatalf("Partial: %+v", p)
			}
			defer func() {
				if recover() == nil {
					t.Fatal("a partial record was encoded")
				}
			}()
			p.Encode(testKeys, "job1")
		})
	}
}
