package parse

import (
	"testing"
)

func TestConnectTo(t *testing.T) {
	list, err := ParseConnectTo(" *.Example.com:443:proxy.internal:8443, api.example.com:443:[2001:db8::1]:443,bad,h:0:x:1,example.org:80:127.0.0.1:5984")
	if err == nil {
		t.Fatal("bad entries not reported")
	}
	if len(list) != 3 {
		t.Fatalf("parsed %d entries, want 3: %+v", len(list), list)
	}
	tests := []struct {
		host string
		port int
		want string
	}{
		{"sub.example.com", 443, "proxy.internal:8443"},
		{"A.B.EXAMPLE.COM", 443, "proxy.internal:8443"},
		{"example.com", 443, ""},
		{"sub.example.com", 80, ""},
		{"api.example.com", 443, "proxy.internal:8443"}, // the first match wins
		{"example.org", 80, "127.0.0.1:5984"},
		{"example.org.", 80, "127.0.0.1:5984"},
		{"notexample.org", 80, ""},
	}
	for _, tc := range tests {
		got, ok := ResolveConnectTo(list, tc.host, tc.port)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s:%d -> %q %v, want %q", tc.host, tc.port, got, ok, tc.want)
		}
	}
	if got, _ := ResolveConnectTo(list[1:2], "api.example.com", 443); got != "[2001:db8::1]:443" {
		t.Errorf("IPv6 target: %q", got)
	}
	o, err := OptionsFromConfig(map[string]string{"connect_to": "example.org:80:127.0.0.1:5984"})
	if err != nil || len(o.ConnectTo) != 1 {
		t.Errorf("OptionsFromConfig: %+v %v", o.ConnectTo, err)
	}
}
