package parse

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const (
	src = `"http://127.0.0.1:5984/src"`
	tgt = `"http://127.0.0.1:5984/tgt"`
)

// doc builds a replication doc body with the given extra members.
func doc(extra string) []byte {
	if extra == "" {
		return []byte(`{"source":` + src + `,"target":` + tgt + `}`)
	}
	return []byte(`{"source":` + src + `,"target":` + tgt + `,` + extra + `}`)
}

func TestReplicationDocErrors(t *testing.T) {
	tests := []struct {
		name, body, reason string
	}{
		{"not an object", `[]`, "Replication document must be a JSON object"},
		{"empty", `{}`, "Missing `source` field"},
		{"no target", `{"source":` + src + `}`, "Missing `target` field"},
		{"null source", `{"source":null,"target":` + tgt + `}`, "Missing `source` field"},
		{"bare name", `{"source":"db","target":` + tgt + `}`, "Local endpoints are not supported: `source` must be an http:// or https:// URL"},
		{"bare name in object", `{"source":` + src + `,"target":{"url":"db"}}`, "Local endpoints are not supported: `target` must be an http:// or https:// URL"},
		{"other scheme", `{"source":"ftp://h/db","target":` + tgt + `}`, "`source` must be an http:// or https:// URL, not ftp://"},
		{"scheme typo", `{"source":"htp://u:secret@h/db","target":` + tgt + `}`, "`source` must be an http:// or https:// URL, not htp://"},
		{"scheme typo in object", `{"source":` + src + `,"target":{"url":"htps://h/db"}}`, "`target` must be an http:// or https:// URL, not htps://"},
		{"number endpoint", `{"source":5,"target":` + tgt + `}`, "`source` must be a URL string or an object"},
		{"object without url", `{"source":{},"target":` + tgt + `}`, "`source` must have a `url`"},
		{"url not a string", `{"source":{"url":5},"target":` + tgt + `}`, "`source` has an invalid url"},
		{"no host", `{"source":"http://","target":` + tgt + `}`, "`source` has an invalid url"},
		{"bad port", `{"source":"http://h:abc/db","target":` + tgt + `}`, "`source` has an invalid url"},
		{"headers not object", `{"source":{"url":"http://h/db","headers":[]},"target":` + tgt + `}`, "if defined `headers` must be an object"},
		{"header value", `{"source":{"url":"http://h/db","headers":{"X":1}},"target":` + tgt + `}`, "`headers` values must be strings"},
		{"auth not object", `{"source":{"url":"http://h/db","auth":"x"},"target":` + tgt + `}`, "if defined, `auth` must be an object"},
		{"continuous", `"continuous":"yes"`, "`continuous` must be a boolean"},
		{"create_target", `"create_target":1`, "`create_target` must be a boolean"},
		{"cancel", `"cancel":"true"`, "`cancel` must be a boolean"},
		{"winning_revs_only", `"winning_revs_only":null`, "`winning_revs_only` must be a boolean"},
		{"use_bulk_get", `"use_bulk_get":"false"`, "`use_bulk_get` must be a boolean"},
		{"doc_write_failure unknown", `"doc_write_failure":"stop"`, "`doc_write_failure` must be `count` or `fail`"},
		{"doc_write_failure not a string", `"doc_write_failure":true`, "`doc_write_failure` must be `count` or `fail`"},
		{"doc_write_failure case", `"doc_write_failure":"FAIL"`, "`doc_write_failure` must be `count` or `fail`"},
		{"use_checkpoints", `"use_checkpoints":0`, "`use_checkpoints` must be a boolean"},
		{"checkpoint false", `"checkpoint":false`, "`checkpoint` must be `both` or `target` (`use_checkpoints: false` writes none)"},
		{"checkpoint source", `"checkpoint":"source"`, "`checkpoint` must be `both` or `target` (`use_checkpoints: false` writes none)"},
		{"checkpoint case", `"checkpoint":"Target"`, "`checkpoint` must be `both` or `target` (`use_checkpoints: false` writes none)"},
		{"checkpoint number", `"checkpoint":1`, "`checkpoint` must be `both` or `target` (`use_checkpoints: false` writes none)"},
		{"create_target_params", `"create_target_params":[]`, "`create_target_params` must be an object"},
		{"doc_ids not array", `"doc_ids":"a"`, "`doc_ids` must be an array"},
		{"doc_ids number", `"doc_ids":[1]`, "`doc_ids` array must contain strings"},
		{"doc_ids empty string", `"doc_ids":[""]`, "`doc_ids` array must contain strings"},
		{"doc_ids bad utf8", `"doc_ids":["%FF"]`, "`doc_ids` must be valid UTF-8 once percent-decoded"},
		{"filter number", `"filter":5`, "`filter` must be a string"},
		{"filter empty", `"filter":""`, "`filter` must be a string"},
		{"filter null", `"filter":null`, "`filter` must be a string"},
		{"filter no slash", `"filter":"byType"`, "Invalid filter. Must match `ddocname/filtername`."},
		{"filter empty name", `"filter":"app/"`, "Invalid filter. Must match `ddocname/filtername`."},
		{"view missing", `"filter":"_view"`, "Invalid `view` parameter."},
		{"view bad", `"filter":"_view","query_params":{"view":"a/b/c"}`, "Invalid `view` parameter."},
		{"query_params", `"query_params":[]`, "`query_params` is not `null` or object"},
		{"selector", `"selector":"x"`, "`selector` must be a JSON object"},
		{"selector operator", `"selector":{"$foo":1}`, "`selector` is invalid: unknown operator `$foo`"},
		{"selector bad arg", `"selector":{"a":{"$in":5}}`, "`selector` is invalid: bad argument for operator `$in`"},
		{"selector unsupported", `"selector":{"$where":"x"}`, "`selector` is invalid: operator `$where` is not supported"},
		{"selector no field", `"selector":{"":1}`, "`selector` is invalid: missing field name"},
		{"selector bad regex", `"selector":{"a":{"$regex":"(("}}`, "`selector` is invalid: `$regex` \"((\" is not a valid regular expression: missing closing )"},
		{"selector PCRE-only regex", `"selector":{"$or":[{"a":{"$not":{"$regex":"x(?=y)"}}}]}`, "`selector` is invalid: `$regex` \"x(?=y)\" is not a valid regular expression: invalid or unsupported Perl syntax"},
		{"doc_ids and filter", `"doc_ids":["a"],"filter":"a/b"`, "`doc_ids`,`filter`,`selector` are mutually  exclusive"},
		{"filter and selector", `"selector":{"a":1},"filter":"a/b"`, "`doc_ids`,`filter`,`selector` are mutually  exclusive"},
		{"doc_ids and selector", `"selector":{"a":1},"doc_ids":[]`, "`doc_ids`,`filter`,`selector` are mutually  exclusive"},
		{"worker_processes words", `"worker_processes":"a few"`, "`worker_processes` must be an integer"},
		{"worker_processes float", `"worker_processes":4.5`, "`worker_processes` must be an integer"},
		{"worker_processes zero", `"worker_processes":0`, "`worker_processes` must be a positive integer"},
		{"worker_batch_size", `"worker_batch_size":-1`, "`worker_batch_size` must be a positive integer"},
		{"http_connections", `"http_connections":true`, "`http_connections` must be an integer"},
		{"connection_timeout", `"connection_timeout":"0"`, "`connection_timeout` must be a positive integer"},
		{"checkpoint_interval", `"checkpoint_interval":0`, "`checkpoint_interval` must be a positive integer"},
		{"retries_per_request", `"retries_per_request":-1`, "`retries_per_request` must be a non-negative integer"},
		{"retries_per_request type", `"retries_per_request":[]`, "`retries_per_request` must be an integer"},
		{"socket_options", `"socket_options":5`, "`socket_options` must be a string"},
		{"proxy and source_proxy", `"proxy":"http://p","source_proxy":"http://q"`, "`proxy` is mutually exclusive with `source_proxy`"},
		{"proxy and target_proxy", `"proxy":"http://p","target_proxy":"http://q"`, "`proxy` is mutually exclusive with `target_proxy`"},
		{"proxy type", `"proxy":5`, "Invalid proxy url"},
		{"proxy no host", `"source_proxy":"http://"`, "Invalid proxy url"},
		{"proxy protocol", `"target_proxy":"ftp://p:21"`, "Unsupported proxy protocol"},
		{"user_ctx type", `"user_ctx":"bob"`, "`user_ctx` must be an object"},
		{"user_ctx name", `"user_ctx":{"name":5}`, "`user_ctx.name` must be a string or null"},
		{"user_ctx roles", `"user_ctx":{"roles":"a"}`, "`user_ctx.roles` must be an array of strings"},
		{"user_ctx role type", `"user_ctx":{"roles":[null]}`, "`user_ctx.roles` must be an array of strings"},
		{"first bad option wins", `"continuous":1,"create_target":1`, "`continuous` must be a boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			if !strings.HasPrefix(tt.body, "{") && !strings.HasPrefix(tt.body, "[") {
				body = doc(tt.body)
			}
			rep, err := ReplicationDoc(body, UserCtx{}, DefaultOptions())
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("got rep %+v, err %v; want *Error %q", rep, err, tt.reason)
			}
			if pe.Reason != tt.reason {
				t.Errorf("reason = %q, want %q", pe.Reason, tt.reason)
			}
		})
	}
}

func TestReplicationDocFields(t *testing.T) {
	opts := DefaultOptions()
	tests := []struct {
		name  string
		body  string
		check func(*Rep) bool
	}{
		{"defaults", "", func(r *Rep) bool {
			return r.WorkerProcesses == 4 && r.WorkerBatchSize == 500 && r.HTTPConnections == 20 &&
				r.ConnectionTimeout == 30000 && r.RetriesPerRequest == 5 && r.CheckpointInterval == 30000 &&
				r.UseCheckpoints && r.UseBulkGet && !r.Continuous && !r.CreateTarget && !r.WinningRevsOnly &&
				r.SocketOptions == defaultSocketOptions && r.Source.URL == "http://127.0.0.1:5984/src/" &&
				r.DocIDs == nil && r.Filter == "" && r.Selector == nil && r.QueryParams == nil &&
				!r.FailsOnDocWriteFailure()
		}},
		{"continuous", `"continuous":true`, func(r *Rep) bool { return r.Continuous }},
		{"create_target", `"create_target":true,"create_target_params":{"q": 4}`, func(r *Rep) bool {
			return r.CreateTarget && string(r.CreateTargetParams) == `{"q":4}`
		}},
		{"cancel", `"cancel":false`, func(r *Rep) bool { return !r.Cancel }},
		{"winning_revs_only", `"winning_revs_only":true`, func(r *Rep) bool { return r.WinningRevsOnly }},
		{"use_bulk_get", `"use_bulk_get":false`, func(r *Rep) bool { return !r.UseBulkGet }},
		{"use_checkpoints", `"use_checkpoints":false`, func(r *Rep) bool { return !r.UseCheckpoints }},
		{"doc_write_failure fail", `"doc_write_failure":"fail"`, func(r *Rep) bool { return r.FailsOnDocWriteFailure() }},
		{"doc_write_failure count is the default, stored as unset", `"doc_write_failure":"count"`, func(r *Rep) bool {
			return r.DocWriteFailure == "" && !r.FailsOnDocWriteFailure()
		}},
		{"checkpoint target", `"checkpoint":"target"`, func(r *Rep) bool { return r.Checkpoint == CheckpointTarget }},
		{"checkpoint both", `"checkpoint":"both"`, func(r *Rep) bool { return r.Checkpoint == CheckpointBoth }},
		{"checkpoint null", `"checkpoint":null`, func(r *Rep) bool { return r.Checkpoint == CheckpointBoth }},
		{"doc_ids", `"doc_ids":["b","a%2Fx","a/x","c+d"]`, func(r *Rep) bool {
			return reflect.DeepEqual(r.DocIDs, []string{"a/x", "b", "c d"})
		}},
		{"doc_ids empty", `"doc_ids":[]`, func(r *Rep) bool { return r.DocIDs != nil && len(r.DocIDs) == 0 }},
		{"doc_ids null", `"doc_ids":null,"filter":"a/b"`, func(r *Rep) bool { return r.DocIDs == nil && r.Filter == "a/b" }},
		{"filter", `"filter":"app/by/type","query_params":{"z":"1","a":"2"}`, func(r *Rep) bool {
			return r.Filter == "app/by/type" && string(r.QueryParams) == `{"z":"1","a":"2"}`
		}},
		{"builtin filter", `"filter":"_doc_ids"`, func(r *Rep) bool { return r.Filter == "_doc_ids" }},
		{"view filter", `"filter":"_view","query_params":{"view":"app/v"}`, func(r *Rep) bool { return r.Filter == "_view" }},
		{"query_params null", `"query_params":null`, func(r *Rep) bool { return r.QueryParams == nil }},
		{"selector", `"selector":{"type": "x"}`, func(r *Rep) bool { return string(r.Selector) == `{"type":"x"}` }},
		{"since_seq", `"since_seq":"5-abc"`, func(r *Rep) bool { return string(r.SinceSeq) == `"5-abc"` }},
		{"since_seq number", `"since_seq":5`, func(r *Rep) bool { return string(r.SinceSeq) == `5` }},
		{"worker_processes string", `"worker_processes":"8"`, func(r *Rep) bool { return r.WorkerProcesses == 8 }},
		{"worker_batch_size", `"worker_batch_size":100`, func(r *Rep) bool { return r.WorkerBatchSize == 100 }},
		{"http_connections", `"http_connections":1`, func(r *Rep) bool { return r.HTTPConnections == 1 }},
		{"connection_timeout", `"connection_timeout":"60000"`, func(r *Rep) bool { return r.ConnectionTimeout == 60000 }},
		{"retries_per_request zero", `"retries_per_request":0`, func(r *Rep) bool { return r.RetriesPerRequest == 0 }},
		{"checkpoint_interval", `"checkpoint_interval":5000`, func(r *Rep) bool { return r.CheckpointInterval == 5000 }},
		{"socket_options", `"socket_options":"[{sndbuf, 4096}, {potato, true}, {nodelay, true}]"`, func(r *Rep) bool {
			return r.SocketOptions == "[{sndbuf, 4096}, {nodelay, true}]"
		}},
		{"proxy", `"proxy":"http://u:p@proxy:3128"`, func(r *Rep) bool {
			return r.Source.Proxy == "http://u:p@proxy:3128" && r.Target.Proxy == "http://u:p@proxy:3128"
		}},
		{"source_proxy", `"source_proxy":"socks5://proxy:1080"`, func(r *Rep) bool {
			return r.Source.Proxy == "socks5://proxy:1080" && r.Target.Proxy == ""
		}},
		{"user_ctx", `"user_ctx":{"name":"bob","roles":["a"]}`, func(r *Rep) bool {
			return r.UserCtx.Name == "bob" && reflect.DeepEqual(r.UserCtx.Roles, []string{"a"})
		}},
		{"owner", `"owner":"bob"`, func(r *Rep) bool { return r.Owner == "bob" }},
		{"_id", `"_id":"my rep"`, func(r *Rep) bool { return r.DocID == "my rep" && r.DB == "" }},
		{"id ignored in docs", `"replication_id":"x","id":5`, func(r *Rep) bool { return r.ID == "" }},
		{"unknown fields", `"comment":{"any":"thing"},"_replication_state":"completed"`, func(r *Rep) bool { return true }},
		{"duplicate member: first wins", `"continuous":true,"continuous":"junk"`, func(r *Rep) bool { return r.Continuous }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ReplicationDoc(doc(tt.body), UserCtx{}, opts)
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if !tt.check(rep) {
				t.Errorf("unexpected rep: %+v", rep)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	basic := func(u, p string) *BasicAuth { return &BasicAuth{Username: u, Password: p} }
	tests := []struct {
		name     string
		endpoint string
		want     Endpoint
	}{
		{"plain", `"http://h/db"`, Endpoint{URL: "http://h/db/"}},
		{"slash kept", `"https://h:6984/db/"`, Endpoint{URL: "https://h:6984/db/"}},
		{"query no slash", `"http://h/db?x=1"`, Endpoint{URL: "http://h/db?x=1"}},
		{"userinfo", `"http://adm:p%40ss@h/db"`, Endpoint{URL: "http://h/db/", Auth: basic("adm", "p@ss")}},
		{"raw @ in password", `"http://adm:p@ss@h/db"`, Endpoint{URL: "http://h/db/", Auth: basic("adm", "p@ss")}},
		{"user only", `"http://adm@h/db"`, Endpoint{URL: "http://h/db/"}},
		{"auth basic", `{"url":"http://h/db","auth":{"basic":{"username":"u","password":"p"}}}`, Endpoint{URL: "http://h/db/", Auth: basic("u", "p")}},
		{"auth basic beats userinfo and header", `{"url":"http://x:y@h/db","headers":{"authorization":"basic ejp3"},"auth":{"basic":{"username":"u","password":"p"}}}`,
			Endpoint{URL: "http://h/db/", Auth: basic("u", "p")}},
		{"userinfo beats header", `{"url":"http://x:y@h/db","headers":{"Authorization":"Basic ejp3"}}`, Endpoint{URL: "http://h/db/", Auth: basic("x", "y")}},
		{"header", `{"url":"http://h/db","headers":{"AUTHORIZATION":"BASIC ejp3","X-A":"1"}}`,
			Endpoint{URL: "http://h/db/", Auth: basic("z", "w"), Headers: map[string]string{"X-A": "1"}}},
		{"bad base64 dropped", `{"url":"http://h/db","headers":{"Authorization":"Basic !!!"}}`, Endpoint{URL: "http://h/db/"}},
		{"bearer kept", `{"url":"http://h/db","headers":{"Authorization":"Bearer t"}}`,
			Endpoint{URL: "http://h/db/", Headers: map[string]string{"Authorization": "Bearer t"}}},
		{"malformed auth.basic ignored", `{"url":"http://x:y@h/db","auth":{"basic":{"username":"u"}}}`, Endpoint{URL: "http://h/db/", Auth: basic("x", "y")}},
		{"other auth kept", `{"url":"http://h/db","auth":{"session":{"a": 1},"basic":{"username":"u","password":"p"}}}`,
			Endpoint{URL: "http://h/db/", Auth: basic("u", "p"), AuthOther: json.RawMessage(`{"session":{"a":1}}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ReplicationDoc([]byte(`{"source":`+tt.endpoint+`,"target":`+tgt+`}`), UserCtx{}, DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rep.Source, tt.want) {
				t.Errorf("source = %+v (auth %+v), want %+v (auth %+v)", rep.Source, rep.Source.Auth, tt.want, tt.want.Auth)
			}
		})
	}
}

func TestReplicateRequest(t *testing.T) {
	opts := DefaultOptions()
	opts.LocalURL = "http://127.0.0.1:5984/"
	opts.LocalHeaders = map[string]string{"Authorization": "Basic YWRtaW46cGFzcw==", "Cookie": "AuthSession=abc"}
	user := UserCtx{Name: "admin", Roles: []string{"_admin"}}

	rep, err := ReplicateRequest([]byte(`{"source":"a/b","target":{"url":"tgt","headers":{"Cookie":"mine"}},"create_target":true}`), user, opts)
	if err != nil {
		t.Fatal(err)
	}
	wantSrc := Endpoint{URL: "http://127.0.0.1:5984/a%2Fb/", Auth: &BasicAuth{"admin", "pass"}, Headers: map[string]string{"Cookie": "AuthSession=abc"}}
	if !reflect.DeepEqual(rep.Source, wantSrc) {
		t.Errorf("source = %+v", rep.Source)
	}
	wantTgt := Endpoint{URL: "http://127.0.0.1:5984/tgt/", Auth: &BasicAuth{"admin", "pass"}, Headers: map[string]string{"Cookie": "mine"}}
	if !reflect.DeepEqual(rep.Target, wantTgt) {
		t.Errorf("target = %+v", rep.Target)
	}
	if rep.UserCtx.Name != "admin" || rep.DB != "" || rep.DocID != "" {
		t.Errorf("user/db = %+v", rep)
	}

	for _, body := range []string{
		`{"cancel":true,"replication_id":"abc continuous"}`,
		`{"cancel":true,"_local_id":"abc+continuous"}`,
		`{"cancel":true,"id":"abc+continuous","replication_id":"other"}`,
	} {
		rep, err := ReplicateRequest([]byte(body), user, opts)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if !rep.Cancel || rep.ID != "abc+continuous" || rep.Source.URL != "" {
			t.Errorf("%s: %+v", body, rep)
		}
	}

	errCases := []struct{ body, reason string }{
		{`"x"`, "Request body must be a JSON object"},
		{`{"cancel":true,"replication_id":5}`, "`replication_id` must be a string"},
		{`{"cancel":true}`, "Missing `source` field"},
		{`{"source":"a"}`, "Missing `target` field"},
	}
	for _, c := range errCases {
		_, err := ReplicateRequest([]byte(c.body), user, opts)
		var pe *Error
		if !errors.As(err, &pe) || pe.Reason != c.reason {
			t.Errorf("%s: err = %v, want %q", c.body, err, c.reason)
		}
	}
	// A scheme typo is not a bare db name, even where bare names are.
	if _, err := ReplicateRequest([]byte(`{"source":"htp://h/db","target":"b"}`), user, opts); err == nil || !strings.Contains(err.Error(), "not htp://") {
		t.Errorf("scheme typo with LocalURL: %v", err)
	}
	// Without LocalURL bare names are invalid, as in documents.
	if _, err := ReplicateRequest([]byte(`{"source":"a","target":"b"}`), user, DefaultOptions()); err == nil {
		t.Error("bare name accepted without LocalURL")
	}
}

func TestOptionsFromConfig(t *testing.T) {
	o, err := OptionsFromConfig(map[string]string{
		"worker_processes": "8", "worker_batch_size": "100", "http_connections": "5",
		"connection_timeout": "10000", "retries_per_request": "0", "checkpoint_interval": "1000",
		"use_checkpoints": "false", "use_bulk_get": "false", "socket_options": "[{nodelay, true}]",
		"max_jobs": "10",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{WorkerProcesses: 8, WorkerBatchSize: 100, HTTPConnections: 5, ConnectionTimeout: 10000,
		RetriesPerRequest: 0, CheckpointInterval: 1000, SocketOptions: "[{nodelay, true}]", VerifySSLCertificates: true}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("options = %+v, want %+v", o, want)
	}
	o, err = OptionsFromConfig(map[string]string{"worker_processes": "x", "use_bulk_get": "yes", "http_connections": "0"})
	if err == nil {
		t.Fatal("no error for bad values")
	}
	for _, r := range []string{"`worker_processes` must be an integer", "`use_bulk_get` must be a boolean", "`http_connections` must be a positive integer"} {
		if !strings.Contains(err.Error(), r) {
			t.Errorf("error %q lacks %q", err, r)
		}
	}
	if !reflect.DeepEqual(o, DefaultOptions()) {
		t.Errorf("bad values changed options: %+v", o)
	}
}

func TestSocketOptions(t *testing.T) {
	tests := []struct{ in, out string }{
		{"[{keepalive, true}, {nodelay, false}]", "[{keepalive, true}, {nodelay, false}]"},
		{"[{priority,3},{potato,true},{sndbuf,10000}].", "[{priority, 3}, {sndbuf, 10000}]"},
		{"[]", "[]"},
		{"<}garbage]][", "[]"},
		{"[{keepalive, true}", "[]"},
		{"[{recbuf, -1}]", "[{recbuf, -1}]"},
	}
	for _, tt := range tests {
		if got := formatSocketOptions(parseSocketOptions(tt.in)); got != tt.out {
			t.Errorf("%q -> %q, want %q", tt.in, got, tt.out)
		}
	}
}

func TestParseRepID(t *testing.T) {
	tests := []struct {
		in   string
		want RepID
	}{
		{"abc", RepID{"abc", ""}},
		{"abc+continuous", RepID{"abc", "+continuous"}},
		{"abc continuous create_target", RepID{"abc", "+continuous+create_target"}},
	}
	for _, tt := range tests {
		if got := ParseRepID(tt.in); got != tt.want || got.String() != strings.ReplaceAll(tt.in, " ", "+") {
			t.Errorf("%q -> %+v", tt.in, got)
		}
	}
}

func TestReplicationDocState(t *testing.T) {
	tests := []struct {
		name      string
		doc       string
		wantState string
		wantRep   bool
		wantErr   bool
	}{
		{"no state", `{"source":"http://a/s","target":"http://a/t"}`, "", true, false},
		{"triggered parses", `{"source":"http://a/s","target":"http://a/t","_replication_state":"triggered"}`, "triggered", true, false},
		{"completed is not parsed", `{"source":1,"_replication_state":"completed"}`, "completed", false, false},
		{"failed is not parsed", `{"_replication_state":"failed"}`, "failed", false, false},
		{"first of repeated names", `{"_replication_state":"completed","_replication_state":"error"}`, "completed", false, false},
		{"state that is not a string", `{"source":"http://a/s","target":"http://a/t","_replication_state":1}`, "", true, false},
		{"invalid doc keeps its state", `{"source":"x","_replication_state":"error"}`, "error", false, true},
		{"not an object", `[]`, "", false, true},
	}
	for _, tt := range tests {
		rep, state, err := ReplicationDocState([]byte(tt.doc), UserCtx{}, DefaultOptions())
		if state != tt.wantState || (rep != nil) != tt.wantRep || (err != nil) != tt.wantErr {
			t.Errorf("%s: state %q, rep %v, err %v; want %q, rep %v, err %v", tt.name, state, rep != nil, err, tt.wantState, tt.wantRep, tt.wantErr)
		}
	}
}

// TestNestedTooDeeply: a doc or body nested deeper than JSON readers go
// is refused with a reason saying so, on every entry point, rather than
// as "not a JSON object".
func TestNestedTooDeeply(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001)
	body := []byte(`{"source":` + src + `,"target":` + tgt + `,"selector":` + deep + `}`)
	const tail = " is JSON nested too deeply: more than 10000 levels of objects and arrays"
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"ReplicationDoc", func() error { _, err := ReplicationDoc(body, UserCtx{}, DefaultOptions()); return err }, "Replication document" + tail},
		{"ReplicationDocState", func() error { _, _, err := ReplicationDocState(body, UserCtx{}, DefaultOptions()); return err }, "Replication document" + tail},
		{"BeforeDocUpdate", func() error { _, err := BeforeDocUpdate(body, UserCtx{Name: "bob"}); return err }, "Replication document" + tail},
		{"ReplicateRequest", func() error { _, err := ReplicateRequest(body, UserCtx{Name: "bob"}, DefaultOptions()); return err }, "Request body" + tail},
	}
	for _, tt := range tests {
		var pe *Error
		if err := tt.run(); !errors.As(err, &pe) || pe.Reason != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
