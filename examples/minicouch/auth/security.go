package auth

import (
	"encoding/json"

	"github.com/couchepi/couchepi/hooks"
)

// Group is one side of a `_security` object: user names and roles.
type Group struct {
	Names []string `json:"names,omitempty"`
	Roles []string `json:"roles,omitempty"`
}

// Security is a db's `_security` object.
type Security struct {
	Admins  Group `json:"admins"`
	Members Group `json:"members"`
}

// ParseSecurity decodes a `_security` object; an empty or invalid one
// yields the zero Security (public db). As in CouchDB, the legacy
// `readers` group stands for `members` when `members` is absent.
func ParseSecurity(raw []byte) Security {
	var wire struct {
		Admins  Group  `json:"admins"`
		Members *Group `json:"members"`
		Readers Group  `json:"readers"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &wire) != nil {
		return Security{}
	}
	s := Security{Admins: wire.Admins, Members: wire.Readers}
	if wire.Members != nil {
		s.Members = *wire.Members
	}
	return s
}

func (g Group) empty() bool { return len(g.Names) == 0 && len(g.Roles) == 0 }

func (g Group) has(u hooks.UserCtx) bool {
	if u.Name != "" {
		for _, n := range g.Names {
			if n == u.Name {
				return true
			}
		}
	}
	for _, r := range g.Roles {
		if u.HasRole(r) {
			return true
		}
	}
	return false
}

// IsDBAdmin reports whether u is a server admin or a db admin.
func (s Security) IsDBAdmin(u hooks.UserCtx) bool {
	return u.IsAdmin() || s.Admins.has(u)
}

// CheckMember returns nil when u may read and write the db: server or db
// admins, members, or anyone when members is empty. Otherwise CouchDB's 401
// for anonymous users or 403 for authenticated ones.
func (s Security) CheckMember(u hooks.UserCtx) *hooks.Error {
	if s.IsDBAdmin(u) || s.Members.empty() || s.Members.has(u) {
		return nil
	}
	if u.Name == "" {
		return &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not authorized to access this db."}
	}
	return &hooks.Error{Status: 403, Err: "forbidden", Reason: "You are not allowed to access this db."}
}

// CheckDBAdmin returns nil when u is a server or db admin, else CouchDB's
// 401 `You are not a db or server admin.`.
func (s Security) CheckDBAdmin(u hooks.UserCtx) *hooks.Error {
	if s.IsDBAdmin(u) {
		return nil
	}
	return &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not a db or server admin."}
}

// CheckServerAdmin returns nil for server admins, else CouchDB's 401
// `You are not a server admin.`.
func CheckServerAdmin(u hooks.UserCtx) *hooks.Error {
	if u.IsAdmin() {
		return nil
	}
	return &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not a server admin."}
}
