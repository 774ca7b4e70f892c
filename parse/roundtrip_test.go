package parse

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// shapes are replication bodies of many forms; they seed the fuzzers too.
var shapes = []string{
	`{"source":"http://h/a","target":"http://h/b"}`,
	`{"source":"https://u:p%3Aw@h:6984/a?x=1","target":{"url":"http://h/b","headers":{"X-A":"1","Authorization":"Basic dTpw"},"auth":{"session":{"k":"<&>"}}},"continuous":true,"create_target":true,"create_target_params":{"q":"4","n":1}}`,
	`{"source":{"url":"http://h/a","auth":{"basic":{"username":"u","password":"p"}}},"target":"http://h/b","doc_ids":["b","a","a%2Fc","x+y"],"since_seq":[1,"g1"]}`,
	`{"source":"http://h/a","target":"http://h/b","filter":"app/f","query_params":{"z":"<1>","a":2.5,"m":null}}`,
	`{"source":"http://h/a","target":"http://h/b","filter":"_view","query_params":{"view":"d/v","key":[1,{"a":true}]}}`,
	`{"source":"http://h/a","target":"http://h/b","selector":{"type":"x","n":{"$gt":1},"$or":[{"a":1},{"b":{"$in":[1,2]}}]}}`,
	`{"source":"http://h/a","target":"http://h/b","proxy":"socks5://u:p@p:1080","worker_processes":"2","worker_batch_size":10,"http_connections":1,"connection_timeout":"100","retries_per_request":0,"checkpoint_interval":1,"use_checkpoints":false,"use_bulk_get":false,"winning_revs_only":true,"socket_options":"[{nodelay, true}]","doc_write_failure":"fail"}`,
	`{"_id":"r","_rev":"1-a","owner":"bob","user_ctx":{"name":"bob","roles":["dev"]},"source":"http://h/a","target":"http://h/b","doc_ids":[],"checkpoint":"target"}`,
	`{"cancel":true,"replication_id":"abc continuous"}`,
	`{"source":"local","target":{"url":"other"},"cancel":true}`,
	`{"source":"http://[::1]:5984/a","target":"http://h/b","source_proxy":"http://p:3128","target_proxy":"https://q"}`,
	`{"source":"http://h/a","target":"http://h/b","selector":{"a":{"$regex":"^x[0-9]+"},"b":{"$not":{"$regex":"(?i)y$"}}}}`,
}

func requestOptions() Options {
	o := DefaultOptions()
	o.LocalURL = "http://127.0.0.1:5984/"
	o.LocalHeaders = map[string]string{"Authorization": "Basic YWRtaW46cGFzcw==", "Cookie": "AuthSession=x"}
	return o
}

// checkRoundTrip asserts rep survives JSON encoding exactly.
func checkRoundTrip(t *testing.T, rep *Rep) {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var back Rep
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	if !reflect.DeepEqual(rep, &back) {
		t.Fatalf("round trip lost data:\n  %+v\n  %+v\n  %s", rep, &back, b)
	}
	if !rep.Equal(&back) {
		t.Fatalf("round trip not Equal: %s", b)
	}
}

func TestRoundTrip(t *testing.T) {
	user := UserCtx{Name: "bob", Roles: []string{"dev"}}
	for _, s := range shapes {
		n := 0
		if rep, err := ReplicationDoc([]byte(s), user, DefaultOptions()); err == nil {
			rep.DB, rep.DocID = "a/_replicator", "r"
			checkRoundTrip(t, rep)
			n++
		}
		if rep, err := ReplicateRequest([]byte(s), user, requestOptions()); err == nil {
			checkRoundTrip(t, rep)
			n++
		}
		if n == 0 {
			t.Errorf("shape parses neither way: %s", s)
		}
	}
}

// checkFuzzResult is the property both fuzzers check.
func checkFuzzResult(t *testing.T, rep *Rep, err error) {
	if err != nil {
		var pe *Error
		if !errors.As(err, &pe) || pe.Reason == "" {
			t.Fatalf("error is not a *parse.Error with a reason: %#v", err)
		}
		if strings.Contains(pe.Reason, "{") && strings.Contains(pe.Reason, "<<") {
			t.Fatalf("reason looks like an Erlang term: %q", pe.Reason)
		}
		return
	}
	checkRoundTrip(t, rep)
	if len(rep.Selector) > 0 {
		v, err := jsonobj.DecodeOrdered(rep.Selector)
		if err != nil {
			t.Fatalf("accepted selector does not decode: %s", rep.Selector)
		}
		for _, re := range regexArgs(v) {
			if _, err := regexp.Compile(re); err != nil {
				t.Fatalf("accepted selector has a $regex the evaluator cannot compile: %q: %v", re, err)
			}
		}
	}
	id := ReplicationID(rep, observedUUID, "function(doc) { return true; }")
	if len(id.Base) != 32 {
		t.Fatalf("bad id %+v", id)
	}
	_ = TransientJobID(rep, observedUUID)
	if red, err := json.Marshal(rep.Redacted()); err != nil || (rep.Source.Auth != nil && len(rep.Source.Auth.Password) > 3 && strings.Contains(string(red), `"`+rep.Source.Auth.Password+`"`)) {
		t.Fatalf("redaction failed: %s", red)
	}
}

// regexArgs returns the string arguments of every `$regex` in a decoded
// selector, however deep.
func regexArgs(v any) []string {
	var out []string
	switch t := v.(type) {
	case jsonobj.Ordered:
		for _, f := range t {
			if s, ok := f.Value.(string); ok && f.Key == "$regex" {
				out = append(out, s)
			}
			out = append(out, regexArgs(f.Value)...)
		}
	case []any:
		for _, e := range t {
			out = append(out, regexArgs(e)...)
		}
	}
	return out
}

func FuzzReplicationDoc(f *testing.F) {
	for _, s := range shapes {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, err := ReplicationDoc(body, UserCtx{Name: "bob"}, DefaultOptions())
		checkFuzzResult(t, rep, err)
		out, err := BeforeDocUpdate(body, UserCtx{Name: "bob"})
		if err == nil {
			if _, err := jsonobj.Parse(out); err != nil {
				t.Fatalf("BeforeDocUpdate returned invalid JSON %q", out)
			}
		} else {
			checkFuzzResult(t, nil, err)
		}
		StripCredentials(body, UserCtx{Name: "eve"})
	})
}

func FuzzReplicateRequest(f *testing.F) {
	for _, s := range shapes {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, err := ReplicateRequest(body, UserCtx{Name: "bob", Roles: []string{"_admin"}}, requestOptions())
		checkFuzzResult(t, rep, err)
	})
}
