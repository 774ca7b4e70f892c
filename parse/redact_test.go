package parse

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, out string }{
		{"http://h/db/", "http://h/db/"},
		{"http://adm:secret@h/db/", "http://adm:*****@h/db/"},
		{"https://adm:se@cr/et@h:6984/db", "https://adm:*****@h:6984/db"},
		{"socks5://u:pw@proxy:1080", "socks5://u:*****@proxy:1080"},
		{"http://user@h/db", "http://user@h/db"},
		{"http://h/db:x@y", "http://h/db:x@y"},
		{"http://a:b c@[bad/", "http://a:*****@[bad/"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.out {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.out)
		}
	}
}

func TestRedactedNeverLeaks(t *testing.T) {
	const pw = "s3cr3t-pw"
	opts := DefaultOptions()
	opts.LocalURL = "http://127.0.0.1:5984/"
	opts.LocalHeaders = map[string]string{"Authorization": "Basic YWRtaW46czNjcjN0LXB3", "Cookie": "AuthSession=" + pw}
	bodies := []string{
		`{"source":"http://u:` + pw + `@h/a","target":{"url":"http://h/b","auth":{"basic":{"username":"u","password":"` + pw + `"},"session":{"token":"` + pw + `"}}},"proxy":"http://p:` + pw + `@proxy:3128"}`,
		`{"source":{"url":"http://h/a","headers":{"Authorization":"Bearer ` + pw + `","X-Api-Key":"k"}},"target":"local"}`,
	}
	for _, b := range bodies {
		rep, err := ReplicateRequest([]byte(b), UserCtx{Name: "u"}, opts)
		if err != nil {
			t.Fatal(err)
		}
		full, _ := json.Marshal(rep)
		if !strings.Contains(string(full), pw) {
			t.Fatalf("test is vacuous: password not in the rep: %s", full)
		}
		red, _ := json.Marshal(rep.Redacted())
		if strings.Contains(string(red), pw) || strings.Contains(string(red), "czNjcjN0LXB3") {
			t.Errorf("redacted rep leaks: %s", red)
		}
		again, _ := json.Marshal(rep)
		if string(again) != string(full) {
			t.Error("Redacted modified the original")
		}
	}
}

func TestEqual(t *testing.T) {
	base := `"source":"http://u:p@h/a","target":"http://h/b","continuous":true,"query_params":{"a":"1","b":"2"},"filter":"d/f"`
	parse := func(extra string) *Rep {
		t.Helper()
		r, err := ReplicationDoc([]byte(`{`+base+extra+`}`), UserCtx{}, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := parse("")
	tests := []struct {
		name  string
		other *Rep
		equal bool
	}{
		{"same", parse(""), true},
		{"non-replication fields", parse(`,"comment":"x","owner":"bob","user_ctx":{"name":"bob"}`), true},
		{"whitespace in json", func() *Rep { r := parse(""); r.QueryParams = json.RawMessage(`{ "a" : "1", "b":"2" }`); return r }(), true},
		{"query param order", func() *Rep { r := parse(""); r.QueryParams = json.RawMessage(`{"b":"2","a":"1"}`); return r }(), false},
		{"password", func() *Rep { r := parse(""); r.Source.Auth.Password = "other"; return r }(), false},
		{"option", parse(`,"worker_processes":2`), false},
		{"checkpoint on the target alone", parse(`,"checkpoint":"target"`), false},
		{"checkpoint both is the default", parse(`,"checkpoint":"both"`), true},
		{"db and doc id ignored", func() *Rep { r := parse(""); r.DB, r.DocID = "_replicator", "d"; return r }(), true},
	}
	for _, tt := range tests {
		if got := a.Equal(tt.other); got != tt.equal {
			t.Errorf("%s: Equal = %v, want %v", tt.name, got, tt.equal)
		}
	}
}
