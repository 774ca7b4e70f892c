package couchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// renderDocForHook renders a doc being written as the JSON a
// before_doc_update hook sees: _id, _rev, body members, _deleted,
// _revisions and attachment metadata (without data).
func renderDocForHook(d *store.Doc) []byte {
	buf := []byte(`{"_id":`)
	buf = jsonobj.AppendString(buf, d.ID)
	if d.Rev != "" {
		buf = append(buf, `,"_rev":`...)
		buf = jsonobj.AppendString(buf, d.Rev)
	}
	body := strings.TrimSpace(string(d.Body))
	if len(body) > 2 {
		inner := strings.TrimSpace(body[1 : len(body)-1])
		if inner != "" {
			buf = append(buf, ',')
			buf = append(buf, inner...)
		}
	}
	if d.Deleted {
		buf = append(buf, `,"_deleted":true`...)
	}
	if d.Revisions != nil {
		b, _ := jsonobj.Marshal(d.Revisions)
		buf = append(buf, `,"_revisions":`...)
		buf = append(buf, b...)
	}
	if len(d.Attachments) > 0 {
		atts := map[string]any{}
		for _, a := range d.Attachments {
			m := map[string]any{"content_type": a.ContentType}
			if a.Stub {
				m["stub"] = true
			} else {
				m["follows"] = true
			}
			if a.Digest != "" {
				m["digest"] = a.Digest
			}
			if a.RevPos > 0 {
				m["revpos"] = a.RevPos
			}
			atts[a.Name] = m
		}
		b, _ := jsonobj.Marshal(atts)
		buf = append(buf, `,"_attachments":`...)
		buf = append(buf, b...)
	}
	return append(buf, '}')
}

// applyHookResult replaces d's id, rev, body and deleted flag by those of
// the doc a before_doc_update hook returned; attachments (with their data)
// and the revision path stay as the client sent them.
func applyHookResult(d *store.Doc, out []byte) error {
	nd, err := parseDoc(out)
	if err != nil {
		return err
	}
	if nd.ID != "" {
		d.ID = nd.ID
	}
	d.Rev = nd.Rev
	d.Body = nd.Body
	d.Deleted = nd.Deleted
	return nil
}

// writeOpts describes one write request.
type writeOpts struct {
	newEdits bool
	user     hooks.UserCtx
}

// writeDocs is the write path shared by every endpoint that writes docs:
// size and users-db checks, before_doc_update (only for subscribed dbs),
// the store write, then after_doc_write for durable successes. Results are
// in input order; a non-nil error fails the whole request.
func (s *Server) writeDocs(ctx context.Context, db *store.DB, docs []*store.Doc, o writeOpts) ([]store.BulkResult, error) {
	name := db.Name()
	results := make([]store.BulkResult, len(docs))
	pending := make([]*store.Doc, 0, len(docs))
	index := make([]int, 0, len(docs))
	if err := s.limits().check(docs); err != nil {
		return nil, err
	}
	before := s.hooks != nil && s.hooks.Subscribed(hooks.BeforeDocUpdate, name)
	vdu, err := s.loadValidator(ctx, db, o.user)
	if err != nil {
		return nil, err
	}
	for i, d := range docs {
		results[i].ID = d.ID
		if isUsersDB(name) && !strings.HasPrefix(d.ID, store.LocalPrefix) {
			if err := s.prepareUserDoc(ctx, db, d, o.user); err != nil {
				results[i].Err = asCouchError(err)
				continue
			}
		}
		if before && !strings.HasPrefix(d.ID, store.LocalPrefix) {
			in := renderDocForHook(d)
			out, err := s.hooks.BeforeDocUpdate(ctx, name, in, o.user)
			if err != nil {
				results[i].Err = asCouchError(err)
				continue
			}
			// A plugin that accepts a doc as is answers the same bytes:
			// d already is that doc, so it is not parsed again.
			if out != nil && !bytes.Equal(out, in) {
				if err := applyHookResult(d, out); err != nil {
					results[i].Err = asCouchError(err)
					continue
				}
				results[i].ID = d.ID
			}
		}
		if err := vdu.validate(ctx, d); err != nil {
			results[i].Err = err
			continue
		}
		pending = append(pending, d)
		index = append(index, i)
	}
	if len(pending) > 0 {
		res, err := db.BulkDocs(ctx, pending, o.newEdits)
		if err != nil {
			return nil, err
		}
		for j, r := range res {
			results[index[j]] = r
		}
		s.afterWrites(ctx, db, res)
	}
	return results, nil
}

// afterWrites sends after_doc_write for each durable success (subscribed
// dbs only), with the doc's winning revision.
func (s *Server) afterWrites(ctx context.Context, db *store.DB, res []store.BulkResult) {
	for _, r := range res {
		if r.Err == nil && !strings.HasPrefix(r.ID, store.LocalPrefix) {
			s.dbUpdated(db)
			break
		}
	}
	if s.hooks == nil || !s.hooks.Subscribed(hooks.AfterDocWrite, db.Name()) {
		return
	}
	for _, r := range res {
		if r.Err != nil || strings.HasPrefix(r.ID, store.LocalPrefix) {
			continue
		}
		s.afterWrite(ctx, db, r.ID)
	}
}

// afterWrite sends after_doc_write for document id's winning revision.
func (s *Server) afterWrite(ctx context.Context, db *store.DB, id string) {
	if s.hooks == nil || !s.hooks.Subscribed(hooks.AfterDocWrite, db.Name()) {
		return
	}
	d, err := db.Get(ctx, id, store.GetOptions{})
	deleted := false
	if errors.Is(err, store.ErrDeleted) {
		// The winner is a tombstone: read the tombstone itself.
		var revs []store.OpenRev
		revs, err = db.OpenRevs(ctx, id, nil, store.GetOptions{})
		if err == nil && len(revs) > 0 {
			d = pickWinner(revs)
			deleted = true
		}
	}
	if err != nil || d == nil {
		s.log.Warn("after_doc_write: cannot read written doc", "db", db.Name(), "id", id, "error", err)
		return
	}
	body, _ := d.MarshalJSON()
	s.hooks.AfterDocWrite(hooks.DocWrite{
		DB: db.Name(), DBUUID: db.UUID(), DocID: id, Rev: d.Rev,
		Seq: s.seqs.format(d.Seq, db.UUID()), Deleted: deleted || d.Deleted, Doc: body,
	})
}

// dbUpdated sends db_updated for db (subscribed plugins only) with its
// current update sequence.
func (s *Server) dbUpdated(db *store.DB) {
	if s.hooks == nil || !s.hooks.Subscribed(hooks.DBUpdated, db.Name()) {
		return
	}
	s.hooks.DBUpdated(db.Name(), s.seqs.format(db.UpdateSeq(), db.UUID()))
}

// pickWinner returns the winning revision among all-deleted leaves: the
// highest generation, then the highest hash.
func pickWinner(revs []store.OpenRev) *store.DocRev {
	var best *store.DocRev
	for _, r := range revs {
		if r.Doc == nil {
			continue
		}
		if best == nil || revLess(best.Rev, r.Doc.Rev) {
			best = r.Doc
		}
	}
	return best
}

// revLess orders rev strings by generation, then hash.
func revLess(a, b string) bool {
	ga, ha, _ := strings.Cut(a, "-")
	gb, hb, _ := strings.Cut(b, "-")
	if len(ga) != len(gb) {
		return len(ga) < len(gb)
	}
	if ga != gb {
		return ga < gb
	}
	return ha < hb
}

// prepareUserDoc applies the rules of CouchDB's `_users` validation
// function to a doc being written (type "user", id org.couchdb.user:<name>,
// no system roles or names, non-admins only write their own doc and cannot
// set or edit roles) and replaces a plain `password` by its pbkdf2 hash.
func (s *Server) prepareUserDoc(ctx context.Context, db *store.DB, d *store.Doc, user hooks.UserCtx) error {
	isAdmin := user.IsAdmin()
	if !isAdmin {
		if raw, err := db.Security(ctx); err == nil {
			isAdmin = auth.ParseSecurity(raw).IsDBAdmin(user)
		}
	}
	if strings.HasPrefix(d.ID, store.DesignPrefix) {
		if !isAdmin {
			return &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not a db or server admin."}
		}
		return nil
	}
	var old map[string]any
	if cur, err := db.Get(ctx, d.ID, store.GetOptions{}); err == nil {
		_ = json.Unmarshal(cur.Body, &old)
	}
	if d.Deleted {
		if !isAdmin && d.ID != "org.couchdb.user:"+user.Name {
			return hooks.Forbidden("You may only update your own user document.")
		}
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(d.Body, &m); err != nil || m == nil {
		m = map[string]any{}
	}
	if m["type"] != "user" {
		return hooks.Forbidden("doc.type must be user")
	}
	name, _ := m["name"].(string)
	if name == "" {
		return hooks.Forbidden("doc.name is required")
	}
	rawRoles, hasRoles := m["roles"].([]any)
	if _, present := m["roles"]; present && !hasRoles {
		return hooks.Forbidden("doc.roles must be an array")
	}
	roles := make([]string, 0, len(rawRoles))
	for _, r := range rawRoles {
		rs, ok := r.(string)
		if !ok {
			return hooks.Forbidden("doc.roles can only contain strings")
		}
		if strings.HasPrefix(rs, "_") {
			return hooks.Forbidden("No system roles (starting with underscore) in users db.")
		}
		roles = append(roles, rs)
	}
	if d.ID != "org.couchdb.user:"+name {
		return hooks.Forbidden("Doc ID must be of the form org.couchdb.user:name")
	}
	if strings.HasPrefix(name, "_") {
		return hooks.Forbidden("Username may not start with underscore.")
	}
	if old != nil && old["name"] != name {
		return hooks.Forbidden("Usernames can not be changed.")
	}
	if !isAdmin {
		if old != nil {
			if user.Name != name {
				return hooks.Forbidden("You may only update your own user document.")
			}
			var oldRoles []string
			if rs, ok := old["roles"].([]any); ok {
				for _, r := range rs {
					if s, ok := r.(string); ok {
						oldRoles = append(oldRoles, s)
					}
				}
			}
			sort.Strings(oldRoles)
			sort.Strings(roles)
			if strings.Join(oldRoles, "\x00") != strings.Join(roles, "\x00") {
				return hooks.Forbidden("Only _admin may edit roles")
			}
		} else if len(roles) > 0 {
			return hooks.Forbidden("Only _admin may set roles")
		}
	}
	if !hasRoles {
		m["roles"] = []any{}
	}
	changed, err := auth.HashUserDoc(m, s.cfg.GetDefault("chttpd_auth", "pbkdf2_prf", "sha256"), auth.Iterations(s.cfg))
	if err != nil {
		return hooks.Forbidden(err.Error())
	}
	if changed || !hasRoles {
		b, err := jsonobj.Marshal(m)
		if err != nil {
			return err
		}
		d.Body = b
	}
	return nil
}

// lookupUser reads `org.couchdb.user:<name>` from `_users` for auth.
func (s *Server) lookupUser(ctx context.Context, name string) (map[string]any, error) {
	db, err := s.store.DB("_users")
	if err != nil {
		return nil, nil
	}
	d, err := db.Get(ctx, "org.couchdb.user:"+name, store.GetOptions{})
	if err != nil {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(d.Body, &m); err != nil {
		return nil, err
	}
	return m, nil
}
