// Package couchuser is CouchDB's user context of a request (userCtx), the
// one type behind hooks.UserCtx and parse.UserCtx: hooks is the plugin
// contract and parse must not import it, so both name this type.
package couchuser

import "encoding/json"

// Role names CouchDB gives special meaning to.
const (
	// AdminRole is a server admin's.
	AdminRole = "_admin"
	// ReplicatorRole is the role of the replicator's own writes to its
	// documents; they skip the replicator's validation.
	ReplicatorRole = "_replicator"
)

// Ctx is the user of a request: Name "" is anonymous and encodes as JSON
// null. A nil and an empty Roles mean the same; both encode as [].
type Ctx struct {
	Name  string   // the user's name; "" for anonymous
	Roles []string // the user's roles, e.g. "_admin"
}

// ctxJSON is Ctx's JSON shape, CouchDB's {"name":…|null,"roles":[…]}.
type ctxJSON struct {
	Name  *string  `json:"name"`
	Roles []string `json:"roles"`
}

// MarshalJSON encodes u as CouchDB does: an anonymous name is null, and
// roles is always an array.
func (u Ctx) MarshalJSON() ([]byte, error) {
	j := ctxJSON{Roles: u.Roles}
	if u.Name != "" {
		name := u.Name
		j.Name = &name
	}
	if j.Roles == nil {
		j.Roles = []string{}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes {"name":…|null,"roles":[…]}: a null name is
// anonymous, and no roles decode to nil.
func (u *Ctx) UnmarshalJSON(b []byte) error {
	var j ctxJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	u.Name = ""
	if j.Name != nil {
		u.Name = *j.Name
	}
	u.Roles = j.Roles
	if len(u.Roles) == 0 {
		u.Roles = nil
	}
	return nil
}

// HasRole reports whether u has role.
func (u Ctx) HasRole(role string) bool {
	for _, r := range u.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// IsAdmin reports whether u is a server admin.
func (u Ctx) IsAdmin() bool { return u.HasRole(AdminRole) }

// IsReplicator reports whether u has the replicator's role.
func (u Ctx) IsReplicator() bool { return u.HasRole(ReplicatorRole) }

// IsSystem reports whether u is a host's own writes on behalf of a
// plugin: a server admin with the replicator's role.
func (u Ctx) IsSystem() bool { return u.IsAdmin() && u.IsReplicator() }
