package parse

import (
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// StripCredentials applies CouchDB's after_doc_read rule for replicator
// databases: a reader who is not an admin, not the replicator and not the
// doc's `owner` gets the doc with credentials removed — "user:password@"
// from string endpoints and from the `url` of object endpoints, the
// `headers` and `auth` members of object endpoints, and (beyond CouchDB)
// "user:password@" from `proxy`, `source_proxy` and `target_proxy` — and a
// revision that differs from the stored one, without the members that
// would reveal the stored one (`_revisions`, `_revs_info`, `_conflicts`,
// `_deleted_conflicts`), even when it holds no credential: as in CouchDB,
// whoever knows the stored revision may write over the doc, owner rules
// notwithstanding, so no non-owner learns it. Design docs and docs read by
// an admin, the replicator or the owner are returned as is. The bool
// reports whether the doc was changed.
//
// The fake revision keeps the generation of the stored `_rev` and replaces
// its hash with the md5 hex of the stripped body (without `_rev`), so it is
// stable across reads and never equals a real revision of that body.
// (CouchDB computes a new revision id from the parent revision; only the
// fact that the rev differs matters to clients, which cannot update with it.)
func StripCredentials(doc []byte, user UserCtx) ([]byte, bool) {
	ms, err := jsonobj.Parse(doc)
	if err != nil {
		return doc, false
	}
	if id, _ := stringMember(ms, "_id"); strings.HasPrefix(id, "_design/") {
		return doc, false
	}
	if user.IsAdmin() || user.IsReplicator() {
		return doc, false
	}
	if owner, ok := ms.Get("owner"); ok && isOwner(owner, user) {
		return doc, false
	}
	changed := false
	out := make(jsonobj.Object, 0, len(ms))
	for _, m := range ms {
		if m.Key == "source" || m.Key == "target" {
			switch kindOf(m.Value) {
			case kindString:
				s, _ := rawString(m.Value)
				if t := stripUserinfo(s); t != s {
					m.Value, changed = jsonobj.AppendString(nil, t), true
				}
			case kindObject:
				if ems, err := jsonobj.Parse(m.Value); err == nil {
					kept := ems[:0:0]
					for _, em := range ems {
						if em.Key == "headers" || em.Key == "auth" {
							changed = true
							continue
						}
						if em.Key == "url" {
							if s, ok := rawString(em.Value); ok {
								if t := stripAnyUserinfo(s); t != s {
									em.Value, changed = jsonobj.AppendString(nil, t), true
								}
							}
						}
						kept = append(kept, em)
					}
					m.Value = kept.Bytes()
				}
			}
		}
		if m.Key == "proxy" || m.Key == "source_proxy" || m.Key == "target_proxy" {
			if s, ok := rawString(m.Value); ok {
				if t := stripAnyUserinfo(s); t != s {
					m.Value, changed = jsonobj.AppendString(nil, t), true
				}
			}
		}
		out = append(out, m)
	}
	rev, hasRev := stringMember(out, "_rev")
	// Members that would reveal the stored revision go: with it, a
	// non-owner could write over the doc.
	noRev := make(jsonobj.Object, 0, len(out))
	for _, m := range out {
		switch m.Key {
		case "_rev", "_revisions", "_revs_info", "_conflicts", "_deleted_conflicts":
		default:
			noRev = append(noRev, m)
		}
	}
	if !hasRev {
		if !changed && len(noRev) == len(out) {
			return doc, false
		}
		return noRev.Bytes(), true
	}
	gen, _, _ := strings.Cut(rev, "-")
	if _, err := strconv.Atoi(gen); err != nil {
		gen = "1"
	}
	newRev := gen + "-" + md5Hex(noRev.Bytes())
	return noRev.Set("_rev", jsonobj.AppendString(nil, newRev)).Bytes(), true
}
