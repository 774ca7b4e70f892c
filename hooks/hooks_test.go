package hooks

import (
	"encoding/json"
	"testing"
)

func TestMatchDB(t *testing.T) {
	cases := []struct {
		pattern, db string
		want        bool
	}{
		{"_replicator", "_replicator", true},
		{"_replicator", "a/_replicator", false},
		{"*/_replicator", "a/_replicator", true},
		{"*/_replicator", "a/b/_replicator", true},
		{"*/_replicator", "_replicator", false},
		{"*/_replicator", "a/_replicator2", false},
		{"*", "anything/at/all", true},
		{"*_guarded", "x_guarded", true},
		{"*_guarded", "_guarded", true},
		{"*_guarded", "x_guardedy", false},
		{"audit_*", "audit_", true},
		{"audit_*", "xaudit_1", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "a1b2c", true},
		{"a*b*c", "acb", false},
		{"a*a", "a", false},
	}
	for _, c := range cases {
		if got := MatchDB(c.pattern, c.db); got != c.want {
			t.Errorf("MatchDB(%q, %q) = %v, want %v", c.pattern, c.db, got, c.want)
		}
		if got := (Subscription{Hook: AfterDocWrite, DB: c.pattern}).Matches(c.db); got != c.want {
			t.Errorf("Subscription %q Matches(%q) = %v", c.pattern, c.db, got)
		}
	}
}

func TestRouteMatches(t *testing.T) {
	cases := []struct {
		route        Route
		method, path string
		want         bool
	}{
		{Route{Path: "/_replicate"}, "POST", "/_replicate", true},
		{Route{Method: "POST", Path: "/_replicate"}, "GET", "/_replicate", false},
		{Route{Method: "GET", Path: "/_scheduler/jobs"}, "HEAD", "/_scheduler/jobs", true},
		{Route{Method: "HEAD", Path: "/_scheduler/jobs"}, "GET", "/_scheduler/jobs", false},
		{Route{Method: "POST", Path: "/_replicate"}, "HEAD", "/_replicate", false},
		{Route{Path: "/_replicate"}, "POST", "/_replicate/x", false},
		{Route{Path: "/_scheduler/jobs/*"}, "GET", "/_scheduler/jobs", true},
		{Route{Path: "/_scheduler/jobs/*"}, "GET", "/_scheduler/jobs/abc", true},
		{Route{Path: "/_scheduler/jobs/*"}, "GET", "/_scheduler/jobsx", false},
		{Route{Path: "/_scheduler/docs/*"}, "GET", "/_scheduler/docs/a%2F_replicator/d", true},
	}
	for _, c := range cases {
		if got := c.route.Matches(c.method, c.path); got != c.want {
			t.Errorf("%+v.Matches(%s %s) = %v, want %v", c.route, c.method, c.path, got, c.want)
		}
	}
}

func TestUserCtxJSON(t *testing.T) {
	cases := []struct {
		u    UserCtx
		json string
	}{
		{UserCtx{}, `{"name":null,"roles":[]}`},
		{UserCtx{Name: "bob", Roles: []string{"a", "_admin"}}, `{"name":"bob","roles":["a","_admin"]}`},
		{SystemUser(), `{"name":null,"roles":["_admin","_replicator"]}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.u)
		if err != nil || string(b) != c.json {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", c.u, b, err, c.json)
		}
		var back UserCtx
		if err := json.Unmarshal([]byte(c.json), &back); err != nil || back.Name != c.u.Name || len(back.Roles) != len(c.u.Roles) {
			t.Errorf("Unmarshal(%s) = %+v, %v", c.json, back, err)
		}
	}
	if !SystemUser().IsAdmin() || !SystemUser().IsSystem() || (UserCtx{Roles: []string{"_admin"}}).IsSystem() {
		t.Error("role checks")
	}
}

func TestErrorJSON(t *testing.T) {
	e := Forbidden("nope")
	b, _ := json.Marshal(e)
	if string(b) != `{"error":"forbidden","reason":"nope"}` || e.Status != 403 || e.Error() != "403 forbidden: nope" {
		t.Errorf("got %s / %q", b, e.Error())
	}
	if c := Conflict(); c.Status != 409 || c.Reason != "Document update conflict." {
		t.Errorf("Conflict() = %+v", c)
	}
}
