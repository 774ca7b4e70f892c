package parse

import (
	"encoding/json"
	"strings"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// BeforeDocUpdate applies CouchDB's write-time rules for documents in a
// replicator database (couch_replicator_docs:before_doc_update) and returns
// the document to store, or a *Error the caller sends as
// 403 {"error":"forbidden","reason":…}:
//
//   - `_design/` and `_local/` docs pass untouched;
//   - a writer with the "_replicator" role passes untouched, unvalidated;
//   - `owner` absent: set to the writer's name (null when anonymous);
//     `owner` equal to the writer: kept; another owner: an admin keeps it
//     (a null owner becomes the admin's name), anyone else is refused with
//     "Can't update replication documents from other users.";
//   - deleted docs and docs in `_replication_state` "failed" are not parsed;
//   - a non-admin may not claim another user's name or a role they do not
//     have in `user_ctx`;
//   - otherwise the doc must parse (ReplicationDoc, no network).
//
// All other fields are preserved; when nothing changes the input slice is
// returned as is.
func BeforeDocUpdate(doc []byte, user UserCtx) ([]byte, error) {
	return beforeDocUpdate(doc, user, nil)
}

// BeforeDocUpdateHosts is BeforeDocUpdate that also applies the host
// policy of opts (allowed_hosts, denied_networks; opts.LocalURL is the
// server's own) to the doc's replication, as CheckHosts does: a doc whose
// job would be refused a host its URLs name is refused now, with
// ReasonHostNotAllowed. The job acts with the rights of the doc's
// `user_ctx`, not of its writer (see Options.LimitsHosts), so an admin's
// doc without the `_admin` role there is checked too; the reason then
// says so.
func BeforeDocUpdateHosts(doc []byte, user UserCtx, opts Options) ([]byte, error) {
	return beforeDocUpdate(doc, user, &opts)
}

func beforeDocUpdate(doc []byte, user UserCtx, hosts *Options) ([]byte, error) {
	ms, err := jsonobj.Parse(doc)
	if err != nil {
		return nil, notObject(err, false)
	}
	if id, ok := stringMember(ms, "_id"); ok && (strings.HasPrefix(id, "_design/") || strings.HasPrefix(id, "_local/")) {
		return doc, nil
	}
	if user.IsReplicator() {
		return doc, nil
	}
	changed := false
	owner, hasOwner := ms.Get("owner")
	switch {
	case !hasOwner:
		ms, changed = ms.Set("owner", nameJSON(user.Name)), true
	case isOwner(owner, user):
	case !user.IsAdmin():
		return nil, newError(reasonOtherUsers)
	case kindOf(owner) == kindNull:
		ms, changed = ms.Set("owner", nameJSON(user.Name)), true
	}
	out := doc
	if changed {
		out = ms.Bytes()
	}

	if deleted, _ := boolMember(ms, "_deleted"); deleted {
		return out, nil
	}
	if state, _ := stringMember(ms, "_replication_state"); state == "failed" {
		return out, nil
	}
	if uc, ok := ms.Get("user_ctx"); ok && !user.IsAdmin() {
		if e := checkUserCtxClaim(uc, user); e != nil {
			return nil, e
		}
	}
	// The members are already split: parse them, not out, a second time.
	rep, perr := parseRepObject(ms, user, DefaultOptions(), false)
	if perr != nil {
		return nil, perr
	}
	if hosts != nil && !hosts.Hosts.Unlimited {
		rep.UserCtx = UserCtx{} // the job's rights: the doc's user_ctx only
		if uc, ok := ms.Get("user_ctx"); ok {
			rep.UserCtx, _ = parseUserCtx(uc)
		}
		if err := CheckHosts(rep, *hosts); err != nil {
			if user.IsAdmin() {
				return nil, newError(ReasonHostNotAllowed + reasonAdminUserCtxHint)
			}
			return nil, err
		}
	}
	return out, nil
}

// reasonAdminUserCtxHint ends the host refusal of an admin's doc.
const reasonAdminUserCtxHint = " (a document's replication is not limited when its `user_ctx` has the `_admin` role)"

// checkUserCtxClaim refuses a `user_ctx` naming another user or holding a
// role the writer does not have. Malformed user_ctx values are left to the
// parser, which reports them.
func checkUserCtxClaim(raw json.RawMessage, user UserCtx) *Error {
	u, e := parseUserCtx(raw)
	if e != nil {
		return nil
	}
	if u.Name != "" && u.Name != user.Name {
		return newError(reasonUserCtxNameClaim)
	}
	for _, r := range u.Roles {
		if !user.HasRole(r) {
			return newError(reasonUserCtxRoleClaim(r))
		}
	}
	return nil
}

// isOwner reports whether the doc's `owner` value is the user: the same
// name, or null for an anonymous user.
func isOwner(owner json.RawMessage, user UserCtx) bool {
	if kindOf(owner) == kindNull {
		return user.Name == ""
	}
	s, ok := rawString(owner)
	return ok && user.Name != "" && s == user.Name
}

// nameJSON is a user name as JSON: a string, or null when anonymous.
func nameJSON(name string) json.RawMessage {
	if name == "" {
		return json.RawMessage("null")
	}
	return jsonobj.AppendString(nil, name)
}

func stringMember(ms jsonobj.Object, key string) (string, bool) {
	v, ok := ms.Get(key)
	if !ok {
		return "", false
	}
	return rawString(v)
}

func boolMember(ms jsonobj.Object, key string) (bool, bool) {
	v, ok := ms.Get(key)
	if !ok {
		return false, false
	}
	return rawBool(v)
}

// CheckOwner applies the ownership rule to a write by a user who is not an
// admin: current is the doc's current winning revision (nil when the doc
// does not exist or is deleted), and a writer may only replace a doc they
// own. It returns the *Error to send as 403 forbidden, or nil. Admins and
// the replicator pass.
func CheckOwner(current []byte, user UserCtx) error {
	if current == nil || user.IsAdmin() || user.IsReplicator() {
		return nil
	}
	ms, err := jsonobj.Parse(current)
	if err != nil {
		return nil
	}
	if deleted, _ := boolMember(ms, "_deleted"); deleted {
		return nil
	}
	if owner, ok := ms.Get("owner"); ok && isOwner(owner, user) {
		return nil
	}
	return newError(reasonOtherUsers)
}
