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
