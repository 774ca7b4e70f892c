package parse

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var (
	bob       = UserCtx{Name: "bob", Roles: []string{"dev"}}
	admin     = UserCtx{Name: "admin", Roles: []string{"_admin"}}
	anonymous = UserCtx{}
	system    = UserCtx{Roles: []string{"_admin", "_replicator"}}
)

// member returns the raw value of key in a JSON object, or "" if absent.
func memberOf(t *testing.T, doc []byte, key string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("result is not an object: %s", doc)
	}
	return string(m[key])
}

func TestBeforeDocUpdate(t *testing.T) {
	valid := `"source":"http://h/a","target":"http://h/b"`
	tests := []struct {
		name      string
		doc       string
		user      UserCtx
		owner     string // expected raw owner in the result ("" = absent)
		reason    string // expected rejection
		unchanged bool
	}{
		{"owner set to writer", `{"_id":"r",` + valid + `}`, bob, `"bob"`, "", false},
		{"anonymous owner is null", `{"_id":"r",` + valid + `}`, anonymous, `null`, "", false},
		{"own doc kept", `{"_id":"r","owner":"bob",` + valid + `}`, bob, `"bob"`, "", true},
		{"other user refused", `{"_id":"r","owner":"admin",` + valid + `}`, bob, "", "Can't update replication documents from other users.", false},
		{"null owner refused for users", `{"_id":"r","owner":null,` + valid + `}`, bob, "", "Can't update replication documents from other users.", false},
		{"admin keeps other owner", `{"_id":"r","owner":"bob",` + valid + `}`, admin, `"bob"`, "", true},
		{"admin replaces null owner", `{"_id":"r","owner":null,` + valid + `}`, admin, `"admin"`, "", false},
		{"replicator role skips everything", `{"_id":"r","owner":"x","continuous":"junk"}`, system, "", "", true},
		{"design doc untouched", `{"_id":"_design/x"}`, bob, "", "", true},
		{"local doc untouched", `{"_id":"_local/x","junk":1}`, bob, "", "", true},
		{"invalid doc refused", `{"_id":"r"}`, bob, "", "Missing `source` field", false},
		{"wrong option type refused", `{"_id":"r","continuous":"yes",` + valid + `}`, admin, "", "`continuous` must be a boolean", false},
		{"deleted not parsed", `{"_id":"r","_deleted":true}`, bob, `"bob"`, "", false},
		{"failed not parsed", `{"_id":"r","owner":"bob","_replication_state":"failed"}`, bob, `"bob"`, "", true},
		{"user_ctx claiming another name", `{"_id":"r","user_ctx":{"name":"admin"},` + valid + `}`, bob, "", "The given `user_ctx.name` is not valid", false},
		{"user_ctx claiming a role", `{"_id":"r","user_ctx":{"name":"bob","roles":["_admin"]},` + valid + `}`, bob, "", "Invalid role (`_admin`) in the `user_ctx`", false},
		{"user_ctx own roles", `{"_id":"r","user_ctx":{"name":"bob","roles":["dev"]},` + valid + `}`, bob, `"bob"`, "", false},
		{"admin may set any user_ctx", `{"_id":"r","user_ctx":{"name":"carol","roles":["x"]},` + valid + `}`, admin, `"admin"`, "", false},
		{"not an object", `[1]`, bob, "", "Replication document must be a JSON object", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.doc)
			out, err := BeforeDocUpdate(in, tt.user)
			if tt.reason != "" {
				var pe *Error
				if !errors.As(err, &pe) || pe.Reason != tt.reason {
					t.Fatalf("err = %v, want %q", err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.unchanged && string(out) != tt.doc {
				t.Errorf("doc changed: %s", out)
			}
			if tt.owner != "" {
				if got := memberOf(t, out, "owner"); got != tt.owner {
					t.Errorf("owner = %s, want %s", got, tt.owner)
				}
			}
			// every other field is preserved
			var before, after map[string]json.RawMessage
			_ = json.Unmarshal(in, &before)
			_ = json.Unmarshal(out, &after)
			for k, v := range before {
				if k != "owner" && string(after[k]) != string(v) {
					t.Errorf("field %s changed: %s -> %s", k, v, after[k])
				}
			}
		})
	}
}

func TestStripCredentials(t *testing.T) {
	d := `{"_id":"r","_rev":"3-abc","owner":"alice","source":"https://u:p@remote/db","target":{"url":"http://h/t","headers":{"Authorization":"Basic eDp5"},"auth":{"basic":{"username":"x","password":"y"}}},"continuous":true}`
	tests := []struct {
		name    string
		doc     string
		user    UserCtx
		changed bool
	}{
		{"non-owner", d, bob, true},
		{"anonymous", d, anonymous, true},
		{"owner", d, UserCtx{Name: "alice"}, false},
		{"admin", d, admin, false},
		{"replicator", d, UserCtx{Roles: []string{"_replicator"}}, false},
		{"design doc", `{"_id":"_design/x","source":"http://u:p@h/db"}`, bob, false},
		{"nothing to strip, no rev", `{"_id":"r","source":"http://h/db","target":"http://h/db2"}`, bob, false},
		{"nothing to strip: the rev is still hidden", `{"_id":"r","_rev":"3-abc","source":"http://h/db","target":"http://h/db2"}`, bob, true},
		{"user without password kept", `{"_id":"r","source":"http://u@h/db"}`, bob, false},
		{"proxy credentials", `{"_id":"r","_rev":"3-abc","source":"http://h/a","target":"http://h/b","proxy":"socks5://u:p@proxy:1080"}`, bob, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed := StripCredentials([]byte(tt.doc), tt.user)
			if changed != tt.changed {
				t.Fatalf("changed = %v, want %v: %s", changed, tt.changed, out)
			}
			if !changed {
				if string(out) != tt.doc {
					t.Errorf("unchanged doc differs: %s", out)
				}
				return
			}
			for _, secret := range []string{"u:p@", "eDp5", `"y"`, "headers", "auth"} {
				if strings.Contains(string(out), secret) {
					t.Errorf("%q still in %s", secret, out)
				}
			}
			if tt.doc == d {
				if got := memberOf(t, out, "source"); got != `"https://remote/db"` {
					t.Errorf("source = %s", got)
				}
				if got := memberOf(t, out, "target"); got != `{"url":"http://h/t"}` {
					t.Errorf("target = %s", got)
				}
				if got := memberOf(t, out, "continuous"); got != "true" {
					t.Errorf("continuous = %s", got)
				}
			}
			rev := memberOf(t, out, "_rev")
			if !strings.HasPrefix(rev, `"3-`) || rev == `"3-abc"` || len(rev) != len(`"3-`)+32+1 {
				t.Errorf("_rev = %s, want a new 3-<md5>", rev)
			}
			again, _ := StripCredentials([]byte(tt.doc), tt.user)
			if string(again) != string(out) {
				t.Error("fake revision is not stable")
			}
		})
	}
}
