package hooks

import (
	"context"
	"testing"
)

// TestUserContext: one key carries the user; without it the user is
// anonymous with an empty (not nil) role list, as CouchDB's userCtx shows.
func TestUserContext(t *testing.T) {
	if u := UserFrom(context.Background()); u.Name != "" || u.Roles == nil || len(u.Roles) != 0 {
		t.Fatalf("anonymous: %+v", u)
	}
	ctx := WithUser(context.Background(), UserCtx{Name: "bob", Roles: []string{"r"}})
	if u := UserFrom(ctx); u.Name != "bob" || len(u.Roles) != 1 {
		t.Fatalf("got %+v", u)
	}
}
