package replicate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/parse"
)

func TestChangesQuery(t *testing.T) {
	cases := []struct {
		name     string
		rep      parse.Rep
		since    string
		wantQ    string
		wantBody string
	}{
		{"plain normal", parse.Rep{ConnectionTimeout: 30000}, `0`,
			"feed=normal&style=all_docs&since=0&timeout=10000", ""},
		{"continuous opaque seq", parse.Rep{Continuous: true, ConnectionTimeout: 30000}, `"12-g1AA"`,
			"feed=continuous&style=all_docs&since=12-g1AA&timeout=10000", ""},
		{"winning revs, short timeout", parse.Rep{WinningRevsOnly: true, ConnectionTimeout: 1500}, `5`,
			"feed=normal&style=main_only&since=5&timeout=1000", ""},
		{"doc_ids", parse.Rep{DocIDs: []string{"a", "b/c"}, ConnectionTimeout: 30000}, `0`,
			"feed=normal&style=all_docs&since=0&timeout=10000&filter=_doc_ids", `{"doc_ids":["a","b/c"]}`},
		{"selector", parse.Rep{Selector: json.RawMessage(`{"type":"x"}`), ConnectionTimeout: 30000}, `0`,
			"feed=normal&style=all_docs&since=0&timeout=10000&filter=_selector", `{"selector":{"type":"x"}}`},
		{"user filter keeps param order, stringifies", parse.Rep{Filter: "f/by", QueryParams: json.RawMessage(`{"z":"1","a":2,"b":true}`), ConnectionTimeout: 30000}, `0`,
			"feed=normal&style=all_docs&since=0&timeout=10000&filter=f%2Fby&z=1&a=2&b=true", ""},
		{"view filter json-encodes keys", parse.Rep{Filter: "_view", QueryParams: json.RawMessage(`{"view":"d/v","key":"k"}`), ConnectionTimeout: 30000}, `0`,
			"feed=normal&style=all_docs&since=0&timeout=10000&filter=_view&view=d%2Fv&key=%22k%22", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &changesReader{rep: &tc.rep}
			q, body := r.query(json.RawMessage(tc.since), 0)
			if q != tc.wantQ || string(body) != tc.wantBody {
				t.Fatalf("got %q %s\nwant %q %s", q, body, tc.wantQ, tc.wantBody)
			}
		})
	}
}

func TestDocPathAndOpenRevs(t *testing.T) {
	paths := map[string]string{
		"plain":       "plain",
		"a/b":         "a%2Fb",
		"_design/x/y": "_design/x%2Fy",
		"sp ace?":     "sp%20ace%3F",
	}
	for in, want := range paths {
		if got := docPath(in); got != want {
			t.Errorf("docPath(%q) = %q want %q", in, got, want)
		}
	}
	var pas []string
	for i := 0; i < 400; i++ {
		pas = append(pas, "12-0123456789abcdef0123456789abcdef")
	}
	// The limit halves on each 414: the URL stays under each limit, with
	// fewer ancestors each time.
	base := "http://h/db/doc"
	prev := len(pas) + 1
	for _, limit := range []int{maxURLLen, maxURLLen / 2, maxURLLen / 4, 875, 437, minURLLen} {
		q := openRevsQuery(base, "13-x", pas, limit)
		if len(base)+1+len(q) >= limit && strings.Contains(q, "atts_since=") || !strings.HasPrefix(q, "revs=true&open_revs=") {
			t.Fatalf("limit %d: URL of %d chars: %.80s…", limit, len(base)+1+len(q), q)
		}
		n := strings.Count(q, "12-0123456789abcdef")
		if n >= prev && n > 0 {
			t.Errorf("limit %d: %d ancestors, not fewer than %d", limit, n, prev)
		}
		prev = n
		if limit == maxURLLen && n == 0 {
			t.Errorf("limit %d: no atts_since", limit)
		}
	}
	if q := openRevsQuery(base, "1-x", nil, maxURLLen); strings.Contains(q, "atts_since") {
		t.Fatalf("atts_since without ancestors: %s", q)
	}
}
