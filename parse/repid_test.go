package parse

import (
	"testing"
)

// observedUUID is the server uuid of the CouchDB 3.5.0 that produced the
// vectors in shared/reference/replication-id-vectors.md.
const observedUUID = "0c0fac2e70fb207e53d88d454146c261"

// observedFilterCode is filters.byType of _design/app on the source db.
const observedFilterCode = "function(doc, req) { return doc.type === req.query.type; }"

// TestReplicationIDObserved checks ids a real CouchDB 3.5.0 answered.
func TestReplicationIDObserved(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"plain", `{"source":"http://admin:pass@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb","continuous":true}`,
			"0e0b715bd9863a3badba441ace7458f0+continuous"},
		{"create_target", `{"source":"http://admin:pass@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb","create_target":true,"continuous":true}`,
			"0e0b715bd9863a3badba441ace7458f0+continuous+create_target"},
		{"auth_object", `{"source":{"url":"http://127.0.0.1:25984/ra","auth":{"basic":{"username":"admin","password":"pass"}}},"target":{"url":"http://127.0.0.1:25984/rb","auth":{"basic":{"username":"admin","password":"pass"}}},"continuous":true}`,
			"0e0b715bd9863a3badba441ace7458f0+continuous"},
		{"header_auth", `{"source":{"url":"http://127.0.0.1:25984/ra","headers":{"Authorization":"Basic YWRtaW46cGFzcw=="}},"target":{"url":"http://127.0.0.1:25984/rb","headers":{"Authorization":"Basic YWRtaW46cGFzcw=="}},"continuous":true}`,
			"0e0b715bd9863a3badba441ace7458f0+continuous"},
		{"doc_ids", `{"source":"http://admin:pass@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb","doc_ids":["b","a","a"],"continuous":true}`,
			"55a918cf78d14a91c4cda063c3a6dcb7+continuous"},
		{"selector", `{"source":"http://admin:pass@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb","selector":{"type":"x","n":{"$gt":1}},"continuous":true}`,
			"94d64814689dae153e94453d8a8d9218+continuous"},
		{"filter_qp", `{"source":"http://admin:pass@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb","filter":"app/byType","query_params":{"type":"x","a":"1"},"continuous":true}`,
			"a0f28c35875a04433454303c7197b972+continuous"},
		{"other_user", `{"source":"http://bob:pw@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb","continuous":true}`,
			"1839b81e1fbf87376285a5447b42a744+continuous"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ReplicateRequest([]byte(tt.body), UserCtx{Name: "admin", Roles: []string{"_admin"}}, DefaultOptions())
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			code := ""
			if rep.Filter == "app/byType" {
				code = observedFilterCode
			}
			if got := ReplicationID(rep, observedUUID, code).String(); got != tt.want {
				t.Errorf("id = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestReplicationIDUpstream is couch_replicator_ids' own unit-test vector:
// the server uuid mocked as the char list "somefixedid".
func TestReplicationIDUpstream(t *testing.T) {
	rep, err := ReplicateRequest([]byte(`{"source":"http://adm:pass@127.0.0.1/abc","target":"http://adm:pass@127.0.0.1/xyz","continuous":true,"create_target":true}`), UserCtx{}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := baseID(rep, etfCharList("somefixedid"), "") + idExt(rep)
	if want := "ff71e1208f93ba054eb60e7ca8683fe4+continuous+create_target"; got != want {
		t.Errorf("id = %s, want %s", got, want)
	}
}

// idOf parses a _replicate body and computes its id with the observed uuid.
func idOf(t *testing.T, body, code string) RepID {
	t.Helper()
	rep, err := ReplicateRequest([]byte(body), UserCtx{}, DefaultOptions())
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return ReplicationID(rep, observedUUID, code)
}

// TestReplicationIDHandDerived checks properties derived by hand from the
// algorithm (reference §2.1): which inputs change the id and which do not.
// The plain vector's base is 0e0b715b…; every body below differs from it in
// one respect.
func TestReplicationIDHandDerived(t *testing.T) {
	const ep = `"source":"http://admin:pass@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb"`
	plain := "0e0b715bd9863a3badba441ace7458f0"
	same := []struct{ name, body string }{
		{"password", `{"source":"http://admin:other@127.0.0.1:25984/ra","target":"http://admin:x@127.0.0.1:25984/rb"}`},
		{"trailing slash given", `{"source":"http://admin:pass@127.0.0.1:25984/ra/","target":"http://admin:pass@127.0.0.1:25984/rb/"}`},
		{"options outside the id", `{` + ep + `,"worker_processes":1,"use_checkpoints":false,"checkpoint_interval":5}`},
		// Where checkpoints live is no part of what is replicated: a
		// replication switched to the target alone finds its checkpoints.
		{"checkpoint target", `{` + ep + `,"checkpoint":"target"}`},
		{"default Accept header", `{"source":{"url":"http://admin:pass@127.0.0.1:25984/ra","headers":{"Accept":"application/json"}},"target":"http://admin:pass@127.0.0.1:25984/rb"}`},
	}
	for _, c := range same {
		if got := idOf(t, c.body, "").Base; got != plain {
			t.Errorf("%s: base %s, want %s", c.name, got, plain)
		}
	}
	differ := []struct{ name, body string }{
		{"winning_revs_only", `{` + ep + `,"winning_revs_only":true}`},
		{"user header", `{"source":{"url":"http://admin:pass@127.0.0.1:25984/ra","headers":{"X-Tenant":"a"}},"target":"http://admin:pass@127.0.0.1:25984/rb"}`},
		{"no user", `{"source":"http://127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb"}`},
		{"host name", `{"source":"http://admin:pass@localhost:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb"}`},
		{"builtin filter", `{` + ep + `,"filter":"_design"}`},
		{"empty doc_ids", `{` + ep + `,"doc_ids":[]}`},
		{"since_seq number", `{` + ep + `,"since_seq":5}`},
		{"since_seq string", `{` + ep + `,"since_seq":"5-g1AAAA"}`},
		{"since_seq other number", `{` + ep + `,"since_seq":6}`},
	}
	seen := map[string]string{plain: "plain"}
	for _, c := range differ {
		got := idOf(t, c.body, "").Base
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: base %s equals the %s id", c.name, got, prev)
		}
		seen[got] = c.name
	}

	// Port: (http, 80), (http, 5984) and (https, 443) are all `default`.
	h := func(u string) string {
		return idOf(t, `{"source":"`+u+`","target":"http://h/b"}`, "").Base
	}
	if h("http://h/a") != h("http://h:80/a") || h("http://h/a") != h("http://h:5984/a") {
		t.Error("http ports 80 and 5984 should be `default`")
	}
	if h("https://h/a") != h("https://h:443/a") || h("https://h/a") == h("https://h:5984/a") {
		t.Error("https port 443 should be `default`, 5984 not")
	}
	if h("http://h/a") == h("https://h/a") {
		t.Log("http and https with default ports hash alike (scheme is not in the id)")
	}

	// Query param order is part of the id; selector key order is not.
	qp1 := idOf(t, `{`+ep+`,"filter":"_view","query_params":{"view":"a/b","x":"1"}}`, "").Base
	qp2 := idOf(t, `{`+ep+`,"filter":"_view","query_params":{"x":"1","view":"a/b"}}`, "").Base
	if qp1 == qp2 {
		t.Error("query_params order should change the id")
	}
	s1 := idOf(t, `{`+ep+`,"selector":{"a":{"$gt":1,"$lt":3}}}`, "").Base
	s2 := idOf(t, `{`+ep+`,"selector":{"a":{"$and":[{"$gt":1},{"$lt":3}]}}}`, "").Base
	if s1 != s2 {
		t.Error("equivalent selectors should normalise to the same id")
	}

	// Filter code is trimmed as CouchDB trims it.
	body := `{` + ep + `,"filter":"app/byType","query_params":{"type":"x","a":"1"},"continuous":true}`
	if got := idOf(t, body, "  "+observedFilterCode+"  ").String(); got != "a0f28c35875a04433454303c7197b972+continuous" {
		t.Errorf("padded filter code: %s", got)
	}
}

func TestTrimFilterCode(t *testing.T) {
	tests := []struct{ in, out string }{
		{"  function(){}  ", "function(){}"},
		{"function(){}\n", "function(){}\n"},
		{"  function(){}  \n", "function(){}\n"},
		{"\tfunction(){}", "\tfunction(){}"},
		{"  function(){\n}  ", "  function(){\n}  "},
	}
	for _, tt := range tests {
		if got := trimFilterCode(tt.in); got != tt.out {
			t.Errorf("%q -> %q, want %q", tt.in, got, tt.out)
		}
	}
}

func TestJobIDs(t *testing.T) {
	if got := PersistentJobID("a1b2", "my doc"); got != "a1b2|my doc" {
		t.Errorf("PersistentJobID = %q", got)
	}
	body := []byte(`{"source":"http://h/a","target":"http://h/b","filter":"app/f"}`)
	ids := map[string]bool{}
	for _, u := range []UserCtx{{Name: "bob"}, {Name: "alice"}, {}} {
		rep, err := ReplicateRequest(body, u, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		id := TransientJobID(rep, observedUUID)
		if len(id) != 32 || id != TransientJobID(rep.Clone(), observedUUID) {
			t.Errorf("job id %q not a stable md5 hex", id)
		}
		ids[id] = true
	}
	if len(ids) != 3 {
		t.Error("different users should get different transient job ids")
	}
	r1, _ := ReplicateRequest(body, UserCtx{Name: "bob"}, DefaultOptions())
	r2, _ := ReplicateRequest([]byte(`{"source":"http://h/a","target":"http://h/b","filter":"app/f","continuous":true}`), UserCtx{Name: "bob"}, DefaultOptions())
	if TransientJobID(r1, observedUUID) == TransientJobID(r2, observedUUID) {
		t.Error("continuous should change the transient job id")
	}
}

// TestReplicationIDSinceSeq (issue 11 item 8): since_seq is hashed last, as
// CouchDB 3.5.2's couch_replicator_ids does (Base4 = Base3 ++ [SinceSeq]).
// The expected ids were computed with Erlang/OTP's term_to_binary and md5
// on that term, built from the plain vector's parts (the same construction
// gives the plain vector, 0e0b715b…, that CouchDB 3.5.0 returned).
func TestReplicationIDSinceSeq(t *testing.T) {
	const ep = `"source":"http://admin:pass@127.0.0.1:25984/ra","target":"http://admin:pass@127.0.0.1:25984/rb"`
	tests := []struct{ name, extra, want string }{
		{"none", ``, "0e0b715bd9863a3badba441ace7458f0"},
		{"integer", `,"since_seq":5`, "28d2ee2c2817c7781aad6159f1140042"},
		{"string", `,"since_seq":"5-g1AAAA"`, "899136923c76f6de8a04e9375f606ee6"},
		{"object", `,"since_seq":{"a":1}`, "7daa5194d8456e4003efcf63ce29808e"},
		{"after winning_revs_only", `,"winning_revs_only":true,"since_seq":5`, "198c1cff1567c37e0556e41b872b282f"},
		{"bignum", `,"since_seq":123456789012345678901234567890`, "dffda44a54e8dfd100675e03a3d58d86"},
	}
	for _, tc := range tests {
		if got := idOf(t, `{`+ep+tc.extra+`}`, "").Base; got != tc.want {
			t.Errorf("%s: base %s, want %s", tc.name, got, tc.want)
		}
	}
}
