package auth

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/couchepi/couchepi/hooks"
)

func TestDeriveKeyVectors(t *testing.T) {
	// RFC 6070 PBKDF2-HMAC-SHA1 test vector.
	dk, err := DeriveKey("sha", "password", "salt", 2)
	if err != nil || dk != "ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957" {
		t.Fatalf("sha1 vector: %s %v", dk, err)
	}
	// PBKDF2-HMAC-SHA256, c=1 (RFC 7914 style vector).
	dk, err = DeriveKey("sha256", "password", "salt", 1)
	if err != nil || dk != "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b" {
		t.Fatalf("sha256 vector: %s %v", dk, err)
	}
}

func TestAdminHashRoundTrip(t *testing.T) {
	for _, prf := range []string{"sha256", "sha"} {
		h, err := HashAdminPassword("s3cret", prf, 10)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseAdminHash(h)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Verify("s3cret") || c.Verify("wrong") {
			t.Errorf("%s: verify wrong", prf)
		}
	}
	if _, err := ParseAdminHash("plain"); err == nil {
		t.Error("plain text parsed as hash")
	}
}

func TestUserDoc(t *testing.T) {
	doc := map[string]any{"_id": "org.couchdb.user:bob", "name": "bob", "type": "user", "roles": []any{"r1"}, "password": "pw"}
	if ok, err := HashUserDoc(doc, "sha256", 10); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, has := doc["password"]; has {
		t.Fatal("password kept")
	}
	// JSON numbers decode as float64.
	doc["iterations"] = float64(10)
	c, ok := UserCredentials(doc)
	if !ok || !c.Verify("pw") || c.Verify("nope") {
		t.Fatal("user credentials do not verify")
	}
}

func newAuth(t *testing.T) (*Authenticator, *config.Config) {
	cfg, err := config.Load("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Set("chttpd_auth", "iterations", "10")
	cfg.Set("admins", "admin", "pass")
	if err := HashAdmins(cfg); err != nil {
		t.Fatal(err)
	}
	users := map[string]map[string]any{}
	bob := map[string]any{"name": "bob", "roles": []any{"reader"}, "password": "bobpw"}
	HashUserDoc(bob, "sha256", 10)
	bob["iterations"] = float64(10)
	users["bob"] = bob
	return New(cfg, func(_ context.Context, n string) (map[string]any, error) { return users[n], nil }), cfg
}

func TestAuthenticate(t *testing.T) {
	a, _ := newAuth(t)
	ck, _ := a.Cookie(context.Background(), "bob")
	tests := []struct {
		name     string
		user, pw string
		cookie   string
		wantName string
		wantErr  int
	}{
		{"anonymous", "", "", "", "", 0},
		{"admin basic", "admin", "pass", "", "admin", 0},
		{"admin wrong", "admin", "nope", "", "", 401},
		{"user basic", "bob", "bobpw", "", "bob", 0},
		{"unknown user", "eve", "x", "", "", 401},
		{"cookie", "", "", ck, "bob", 0},
		{"bad cookie", "", "", "Ym9iOjA6eHh4", "", 0},
	}
	for _, tc := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.user != "" {
			r.SetBasicAuth(tc.user, tc.pw)
		}
		if tc.cookie != "" {
			r.Header.Set("Cookie", CookieName+"="+tc.cookie)
		}
		u, _, err := a.Authenticate(r)
		if tc.wantErr != 0 {
			if err == nil || err.Status != tc.wantErr {
				t.Errorf("%s: err %v, want %d", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || u.Name != tc.wantName {
			t.Errorf("%s: got %q %v", tc.name, u.Name, err)
		}
	}
	// Expired cookie.
	a.now = func() time.Time { return time.Now().Add(time.Hour) }
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Cookie", CookieName+"="+ck)
	if u, _, _ := a.Authenticate(r); u.Name != "" {
		t.Error("expired cookie accepted")
	}
}

func TestSecurity(t *testing.T) {
	anon := hooks.UserCtx{}
	bob := hooks.UserCtx{Name: "bob", Roles: []string{"reader"}}
	eve := hooks.UserCtx{Name: "eve"}
	admin := hooks.UserCtx{Name: "admin", Roles: []string{"_admin"}}
	sec := ParseSecurity([]byte(`{"members":{"roles":["reader"]},"admins":{"names":["eve"]}}`))
	tests := []struct {
		u       hooks.UserCtx
		member  int
		dbAdmin bool
	}{
		{anon, 401, false}, {bob, 0, false}, {eve, 0, true}, {admin, 0, true},
		{hooks.UserCtx{Name: "zed"}, 403, false},
	}
	for _, tc := range tests {
		err := sec.CheckMember(tc.u)
		if (err == nil && tc.member != 0) || (err != nil && err.Status != tc.member) {
			t.Errorf("%v: member err %v want %d", tc.u, err, tc.member)
		}
		if sec.IsDBAdmin(tc.u) != tc.dbAdmin {
			t.Errorf("%v: dbadmin wrong", tc.u)
		}
	}
	if ParseSecurity(nil).CheckMember(anon) != nil {
		t.Error("public db refused anonymous")
	}
}

func TestLockout(t *testing.T) {
	a, _ := newAuth(t)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := a.Login(ctx, "bob", "wrong", "10.0.0.1"); err != ErrUnauthorized {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	if _, err := a.Login(ctx, "bob", "bobpw", "10.0.0.1"); err != ErrLocked {
		t.Fatalf("right password after 5 failures: %v, want locked", err)
	}
	if _, err := a.Login(ctx, "bob", "bobpw", "10.0.0.2"); err != nil {
		t.Fatalf("other address: %v", err)
	}
	for i := 0; i < 6; i++ {
		a.Login(ctx, "nobody", "x", "10.0.0.1")
	}
	if _, err := a.Login(ctx, "nobody", "x", "10.0.0.1"); err != ErrUnauthorized {
		t.Fatalf("unknown users are not locked: %v", err)
	}
	a.now = func() time.Time { return time.Now().Add(6 * time.Minute) }
	if _, err := a.Login(ctx, "bob", "bobpw", "10.0.0.1"); err != nil {
		t.Fatalf("after max_lifetime: %v", err)
	}
}

// TestSecurityLegacyReaders: `readers` (pre-2.0 name of `members`) guards
// the db when `members` is absent, and is ignored when `members` is present.
func TestSecurityLegacyReaders(t *testing.T) {
	john, other := hooks.UserCtx{Name: "john"}, hooks.UserCtx{Name: "mallory"}
	tests := []struct {
		sec               string
		johnErr, otherErr int
	}{
		{`{"readers":{"names":["john"]}}`, 0, 403},
		{`{"readers":{"names":["john"]},"members":{}}`, 0, 0},
		{`{"readers":{"names":["nobody"]},"members":{"names":["john"]}}`, 0, 403},
		{`{"readers":{"roles":["r"]}}`, 403, 403},
	}
	for _, tc := range tests {
		sec := ParseSecurity([]byte(tc.sec))
		for _, c := range []struct {
			u    hooks.UserCtx
			want int
		}{{john, tc.johnErr}, {other, tc.otherErr}} {
			got := 0
			if err := sec.CheckMember(c.u); err != nil {
				got = err.Status
			}
			if got != c.want {
				t.Errorf("%s: %s: got %d, want %d", tc.sec, c.u.Name, got, c.want)
			}
		}
	}
}
