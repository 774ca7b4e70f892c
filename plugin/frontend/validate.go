package frontend

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
)

// BeforeDocUpdate applies CouchDB's write-time rules to a replication doc
// (parse.BeforeDocUpdateHosts: owner handling, then parsing without
// network, then the host policy of opts, whose LocalURL is the server's).
// The replicator's own writes (role `_replicator`) pass unchanged; a doc
// that does not parse, or names a host the policy forbids, is rejected
// with 403 forbidden and the reason. It needs no state, so it is served
// before the plugin has started.
//
// current returns the doc's current winning revision (nil, nil when there
// is none); it is called only for writers who are not admins, so that they
// can only replace docs they own, whatever `owner` or `_rev` they send and
// with new_edits=false too.
func BeforeDocUpdate(doc []byte, user hooks.UserCtx, opts parse.Options, current func(id string) ([]byte, error)) ([]byte, error) {
	out, err := parse.BeforeDocUpdateHosts(doc, parseUser(user), opts)
	if err == nil && current != nil && !user.IsAdmin() && !parseUser(user).IsReplicator() {
		if id := docID(doc); id != "" && !strings.HasPrefix(id, "_design/") && !strings.HasPrefix(id, "_local/") {
			cur, cerr := current(id)
			if cerr != nil {
				return nil, cerr
			}
			err = parse.CheckOwner(cur, parseUser(user))
		}
	}
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

// docID returns a doc's `_id`, or "" when it has none.
func docID(doc []byte) string {
	var d struct {
		ID string `json:"_id"`
	}
	json.Unmarshal(doc, &d)
	return d.ID
}
