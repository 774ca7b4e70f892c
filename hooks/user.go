package hooks

import "context"

// userKey is the one context key for the user of a request, on both sides
// of the plugin boundary.
type userKey struct{}

// WithUser returns a copy of ctx carrying the authenticated user of a
// request. The host reads it to forward a request to a plugin route, and a
// plugin's handler finds it there (sdk.User).
func WithUser(ctx context.Context, u UserCtx) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user WithUser put in ctx, or the anonymous user.
func UserFrom(ctx context.Context) UserCtx {
	if u, ok := ctx.Value(userKey{}).(UserCtx); ok {
		return u
	}
	return UserCtx{Roles: []string{}}
}
