package frontend

import (
	"errors"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
)

// BeforeDocUpdate applies CouchDB's write-time rules to a replication doc
// (parse.BeforeDocUpdate: owner handling, then parsing without network).
// The replicator's own writes (role `_replicator`) pass unchanged; a doc
// that does not parse is rejected with 403 forbidden and the parse reason.
// It needs no state, so it is served before the plugin has started.
func BeforeDocUpdate(doc []byte, user hooks.UserCtx) ([]byte, error) {
	out, err := parse.BeforeDocUpdate(doc, parseUser(user))
	if err != nil {
		var pe *parse.Error
		if errors.As(err, &pe) {
			return nil, hooks.Forbidden(pe.Reason)
		}
		return nil, hooks.Forbidden(err.Error())
	}
	return out, nil
}

// AfterDocRead hides endpoint credentials from readers who are neither
// admins, the replicator nor the doc's owner (parse.StripCredentials).
func AfterDocRead(doc []byte, user hooks.UserCtx) []byte {
	out, _ := parse.StripCredentials(doc, parseUser(user))
	return out
}
