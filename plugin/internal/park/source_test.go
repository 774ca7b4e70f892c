package park

import (
	"testing"

	"github.com/couchepi/couchepi/parse"
)

func TestSourceOf(t *testing.T) {
	local := localRoot("http://127.0.0.1:5984/")
	tests := []struct {
		name      string
		ep        parse.Endpoint
		wantSrc   source
		wantLocal bool
		wantOK    bool
	}{
		{"local db", parse.Endpoint{URL: "http://127.0.0.1:5984/src/"}, source{"http://127.0.0.1:5984/", "src"}, true, true},
		{"localhost is 127.0.0.1", parse.Endpoint{URL: "http://LOCALHOST:5984/src"}, source{"http://127.0.0.1:5984/", "src"}, true, true},
		{"escaped db name", parse.Endpoint{URL: "http://127.0.0.1:5984/a%2Fb%2B/"}, source{"http://127.0.0.1:5984/", "a/b+"}, true, true},
		{"other port is remote", parse.Endpoint{URL: "http://127.0.0.1:5985/src/", Auth: &parse.BasicAuth{Username: "bob", Password: "x"}},
			source{"http://127.0.0.1:5985/\x00bob", "src"}, false, true},
		{"default https port", parse.Endpoint{URL: "https://db.example.com/src/"}, source{"https://db.example.com:443/\x00", "src"}, false, true},
		{"under a path prefix", parse.Endpoint{URL: "http://h:80/couch/src/"}, source{"http://h:80/couch/\x00", "src"}, false, true},
		{"through a proxy is not local", parse.Endpoint{URL: "http://127.0.0.1:5984/src/", Proxy: "http://p:3128"},
			source{"http://127.0.0.1:5984/\x00", "src"}, false, true},
		{"no db", parse.Endpoint{URL: "http://127.0.0.1:5984/"}, source{}, false, false},
		{"query", parse.Endpoint{URL: "http://127.0.0.1:5984/src?x=1"}, source{}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, isLocal, ok := sourceOf(tc.ep, local)
			if src != tc.wantSrc || isLocal != tc.wantLocal || ok != tc.wantOK {
				t.Errorf("sourceOf(%q) = %q, %v, %v; want %q, %v, %v", tc.ep.URL, src, isLocal, ok, tc.wantSrc, tc.wantLocal, tc.wantOK)
			}
			if ok && rootURL(src.server) == "" {
				t.Errorf("rootURL(%q) is empty", src.server)
			}
		})
	}
}

func TestSeqParam(t *testing.T) {
	for in, want := range map[string]string{`"12-abc"`: "12-abc", `42`: "42", ``: "0", `[1,"x"]`: `[1,"x"]`} {
		if got := seqParam([]byte(in)); got != want {
			t.Errorf("seqParam(%s) = %q, want %q", in, got, want)
		}
	}
}
