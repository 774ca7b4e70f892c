package couchapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// absURL is the absolute URL of path on the server the request reached.
func absURL(r *http.Request, path string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + path
}

// couchURLEncode escapes s for a Location header as CouchDB's
// couch_util:url_encode does: every byte but ASCII letters, digits and
// `_.-:` becomes %XX, so a design doc's slash is %2F (_design%2Fd1).
func couchURLEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-', c == ':':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// docURL is the absolute URL of doc id in the request's db, as CouchDB
// writes it in Location.
func docURL(d *dbReq, id string) string {
	return absURL(d.r, "/"+couchURLEncode(d.name)+"/"+couchURLEncode(id))
}

// docETag is the ETag of a stored revision: its rev, quoted; a _local
// doc's, whose rev need not change when its body does, also hashes the
// body (CouchDB's doc_etag).
func docETag(id, rev string, body []byte) string {
	if strings.HasPrefix(id, store.LocalPrefix) {
		return etagOf(rev, string(body))
	}
	return `"` + rev + `"`
}

// serveDoc dispatches `/{db}/{id}` and `/{db}/{id}/{attachment}`.
func (s *Server) serveDoc(d *dbReq, id string, att []string) {
	if isUsersDB(d.name) && !d.user.IsAdmin() && !d.sec.IsDBAdmin(d.user) {
		own := "org.couchdb.user:" + d.user.Name
		if id != own && !(d.user.Name == "" && d.r.Method == "PUT" && len(att) == 0) {
			if d.user.Name == "" {
				writeError(d.w, &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not authorized to access this db."})
			} else {
				writeError(d.w, hooks.Forbidden("You may only read your own user document."))
			}
			return
		}
	}
	if len(att) > 0 {
		s.serveAttachment(d, id, strings.Join(att, "/"))
		return
	}
	switch d.r.Method {
	case "GET", "HEAD":
		s.getDoc(d, id)
	case "PUT":
		s.putDoc(d, id)
	case "DELETE":
		s.deleteDoc(d, id)
	case "COPY":
		s.copyDoc(d, id)
	default:
		writeError(d.w, methodNotAllowed("DELETE,GET,HEAD,PUT,COPY"))
	}
}

// checkDesignWrite enforces that only db admins write design docs.
func checkDesignWrite(d *dbReq, id string) *hooks.Error {
	if strings.HasPrefix(id, store.DesignPrefix) {
		return d.sec.CheckDBAdmin(d.user)
	}
	return nil
}

// writeDocOK answers a successful write of doc (stored as rev) as
// CouchDB answers its method: Location on PUT, POST and COPY, an ETag on
// PUT, DELETE and COPY.
func writeDocOK(d *dbReq, status int, doc *store.Doc, rev string) {
	if d.r.Method != "DELETE" {
		d.w.Header().Set("Location", docURL(d, doc.ID))
	}
	if d.r.Method != "POST" {
		d.w.Header().Set("ETag", docETag(doc.ID, rev, doc.Body))
	}
	writeJSON(d.w, status, struct {
		OK  bool   `json:"ok"`
		ID  string `json:"id"`
		Rev string `json:"rev"`
	}{true, doc.ID, rev})
}

// writeOne writes one doc through the full write path and answers.
func (s *Server) writeOne(d *dbReq, doc *store.Doc, newEdits bool, status int) {
	if err := checkDesignWrite(d, doc.ID); err != nil {
		writeError(d.w, err)
		return
	}
	if err := validateDesignDoc(doc); err != nil {
		writeError(d.w, err)
		return
	}
	res, err := s.writeDocs(d.ctx(), d.db, []*store.Doc{doc}, writeOpts{newEdits: newEdits, user: d.user})
	if err != nil {
		writeError(d.w, err)
		return
	}
	if res[0].Err != nil {
		writeError(d.w, res[0].Err)
		return
	}
	rev := res[0].Rev
	if rev == "" {
		rev = doc.Rev
	}
	if d.query("batch") == "ok" {
		status = 202
	}
	doc.ID = res[0].ID
	writeDocOK(d, status, doc, rev)
}

// parseDocBody parses a JSON doc body with CouchDB's errors.
func parseDocBody(b []byte) (*store.Doc, *hooks.Error) {
	if herr := validDocJSON(bytes.TrimSpace(b), 0); herr != nil {
		return nil, herr
	}
	doc, err := parseValidDoc(b)
	if err != nil {
		return nil, asCouchError(err)
	}
	return doc, nil
}

func (s *Server) putDoc(d *dbReq, id string) {
	mt, params := mediaType(d.r)
	var doc *store.Doc
	var cleanup func()
	if mt == "multipart/related" {
		var herr *hooks.Error
		doc, cleanup, herr = readMultipartDoc(d.r, params["boundary"], d.db)
		if cleanup != nil {
			defer cleanup()
		}
		if herr != nil {
			writeError(d.w, herr)
			return
		}
	} else {
		b, herr := readBody(d.r)
		if herr != nil {
			writeError(d.w, herr)
			return
		}
		if doc, herr = parseDocBody(b); herr != nil {
			writeError(d.w, herr)
			return
		}
	}
	// As CouchDB: the id in the URL wins over an `_id` in the body.
	doc.ID = id
	if herr := s.checkDocID(id); herr != nil {
		writeError(d.w, herr)
		return
	}
	if rev := d.query("rev"); rev != "" {
		if doc.Rev != "" && doc.Rev != rev {
			writeError(d.w, badRequest("Document rev from request body and query string have different values"))
			return
		}
		doc.Rev = rev
	} else if im := strings.Trim(d.r.Header.Get("If-Match"), `"`); im != "" && doc.Rev == "" {
		doc.Rev = im
	}
	if doc.Rev != "" && !strings.HasPrefix(id, store.LocalPrefix) && !validRev(doc.Rev) {
		writeError(d.w, errBadRev)
		return
	}
	newEdits := d.query("new_edits") != "false"
	s.writeOne(d, doc, newEdits, 201)
}

func (s *Server) postDoc(d *dbReq) {
	if herr := requireJSONType(d.r); herr != nil {
		writeError(d.w, herr)
		return
	}
	b, herr := readBody(d.r)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	doc, herr := parseDocBody(b)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	if doc.ID == "" {
		doc.ID = auth.NewSalt()
	}
	s.writeOne(d, doc, true, 201)
}

func (s *Server) deleteDoc(d *dbReq, id string) {
	// CouchDB opens the doc first: deleting a missing or deleted doc is
	// 404 whatever the rev says.
	if _, err := d.db.Get(d.ctx(), id, store.GetOptions{}); err != nil {
		writeError(d.w, err)
		return
	}
	rev := d.query("rev")
	if rev == "" {
		rev = strings.Trim(d.r.Header.Get("If-Match"), `"`)
	}
	if rev == "" && !strings.HasPrefix(id, store.LocalPrefix) {
		writeError(d.w, hooks.Conflict())
		return
	}
	if rev != "" && !strings.HasPrefix(id, store.LocalPrefix) && !validRev(rev) {
		writeError(d.w, errBadRev)
		return
	}
	doc := &store.Doc{ID: id, Rev: rev, Deleted: true, Body: []byte("{}")}
	s.writeOne(d, doc, true, 200)
}

// docOptions parses the query options of a document read.
func docOptions(q url.Values) (store.GetOptions, *hooks.Error) {
	o := store.GetOptions{
		Rev:              q.Get("rev"),
		Revs:             q.Get("revs") == "true",
		RevsInfo:         q.Get("revs_info") == "true",
		Conflicts:        q.Get("conflicts") == "true",
		DeletedConflicts: q.Get("deleted_conflicts") == "true",
		LocalSeq:         q.Get("local_seq") == "true",
		Latest:           q.Get("latest") == "true",
		Attachments:      q.Get("attachments") == "true",
		AttEncodingInfo:  q.Get("att_encoding_info") == "true",
	}
	if q.Get("meta") == "true" {
		o.RevsInfo, o.Conflicts, o.DeletedConflicts = true, true, true
	}
	if v := q.Get("atts_since"); v != "" {
		if err := json.Unmarshal([]byte(v), &o.AttsSince); err != nil {
			return o, badRequest("atts_since must be a JSON array of revs")
		}
	}
	if o.Rev != "" && !validRev(o.Rev) {
		return o, errBadRev
	}
	return o, nil
}

// validRev reports whether s looks like "<gen>-<hash>".
func validRev(s string) bool {
	g, h, ok := strings.Cut(s, "-")
	if !ok || g == "" || h == "" {
		return false
	}
	for _, c := range g {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// acceptsMultipart reports whether the client accepts the multipart type.
func acceptsMultipart(r *http.Request, typ string) bool {
	return strings.Contains(r.Header.Get("Accept"), typ)
}

func (s *Server) getDoc(d *dbReq, id string) {
	q := d.r.URL.Query()
	opts, herr := docOptions(q)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	if or := q.Get("open_revs"); or != "" {
		s.openRevs(d, id, or, revOptions(opts))
		return
	}
	if opts.Latest {
		// As CouchDB: latest reads the winning revision whatever rev says.
		opts.Rev = ""
	}
	if opts.Rev != "" {
		opts = revOptions(opts)
	}
	doc, err := d.db.Get(d.ctx(), id, opts)
	if err != nil {
		writeError(d.w, err)
		return
	}
	// As CouchDB: no ETag on an answer with metadata about the doc's other
	// revisions or its seq, which can change while the revision does not.
	withETag := len(doc.RevsInfo) == 0 && !opts.LocalSeq && len(doc.Conflicts) == 0 && len(doc.DeletedConflicts) == 0
	etag := docETag(doc.ID, doc.Rev, doc.Body)
	hooked := s.readHooked(d.name) && !strings.HasPrefix(doc.ID, store.LocalPrefix)
	if !hooked {
		if withETag && notModified(d.w, d.r, etag) {
			return
		}
		wantData := false
		for _, a := range doc.Attachments {
			wantData = wantData || !a.Stub
		}
		if wantData && acceptsMultipart(d.r, "multipart/related") {
			s.writeMultipartDoc(d, doc)
			return
		}
	}
	body, err := s.renderDoc(d, doc, false)
	if err != nil {
		writeError(d.w, err)
		return
	}
	if withETag && hooked {
		// after_doc_read may present another revision (the replicator
		// does, to readers who must not learn the stored one): the ETag
		// follows the body.
		if notModified(d.w, d.r, docETag(doc.ID, renderedRev(body), body)) {
			return
		}
	}
	writeRawJSON(d.w, 200, body)
}

// revOptions are the options of a read of given revisions (rev=,
// open_revs, _bulk_get): as in CouchDB, such a read carries no metadata
// about the doc's other revisions or its seq.
func revOptions(o store.GetOptions) store.GetOptions {
	o.RevsInfo, o.Conflicts, o.DeletedConflicts, o.LocalSeq = false, false, false, false
	return o
}

// readHooked reports whether reads of db pass through after_doc_read.
func (s *Server) readHooked(db string) bool {
	return s.hooks != nil && s.hooks.Subscribed(hooks.AfterDocRead, db)
}

// renderDoc renders a revision (attachments with data as its Stub flags
// say) and passes it through after_doc_read for subscribed dbs.
func (s *Server) renderDoc(d *dbReq, doc *store.DocRev, follows bool) ([]byte, error) {
	var buf bytes.Buffer
	if err := d.db.WriteDocJSON(d.ctx(), &buf, doc, follows); err != nil {
		return nil, err
	}
	if s.readHooked(d.name) && !strings.HasPrefix(doc.ID, store.LocalPrefix) {
		out, err := s.hooks.AfterDocRead(d.ctx(), d.name, buf.Bytes(), d.user)
		if err != nil {
			return nil, err
		}
		if out != nil {
			return out, nil
		}
	}
	return buf.Bytes(), nil
}

// writeDoc writes a revision's JSON to w; without an after_doc_read hook
// on the db it is rendered straight into w (pass a *bufio.Writer of at
// least 4 KiB to avoid per-doc buffers).
func (s *Server) writeDoc(d *dbReq, w io.Writer, doc *store.DocRev) error {
	if !s.readHooked(d.name) || strings.HasPrefix(doc.ID, store.LocalPrefix) {
		return d.db.WriteDocJSON(d.ctx(), w, doc, false)
	}
	body, err := s.renderDoc(d, doc, false)
	if err != nil {
		return err
	}
	_, err = w.Write(body)
	return err
}

// openRevs answers GET /{db}/{id}?open_revs=all|[…] as a JSON array or,
// when the client accepts it, multipart/mixed.
func (s *Server) openRevs(d *dbReq, id, raw string, opts store.GetOptions) {
	var revs []string
	if raw != "all" {
		if err := json.Unmarshal([]byte(raw), &revs); err != nil {
			writeError(d.w, badRequest("Invalid open_revs value"))
			return
		}
		for _, r := range revs {
			if !validRev(r) {
				writeError(d.w, errBadRev)
				return
			}
		}
	}
	multipartOut := acceptsMultipart(d.r, "multipart/mixed") && !s.readHooked(d.name)
	if multipartOut {
		// CouchDB always sends attachment bodies in a multipart/mixed
		// open_revs answer (those after atts_since): its replicator asks
		// without attachments=true and refuses stubs it has not got
		// ("Invalid attachment stub").
		opts.Attachments = true
	}
	res, err := d.db.OpenRevs(d.ctx(), id, revs, opts)
	if err != nil && !(errors.Is(err, store.ErrNotFound) && revs == nil) {
		writeError(d.w, err)
		return
	}
	if err != nil {
		writeError(d.w, errMissing)
		return
	}
	if multipartOut {
		s.writeMultipartMixed(d, res)
		return
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, r := range res {
		if i > 0 {
			buf.WriteByte(',')
		}
		if r.Doc == nil {
			buf.WriteString(`{"missing":`)
			buf.Write(jsonobj.AppendString(nil, r.Missing))
			buf.WriteByte('}')
			continue
		}
		body, err := s.renderDoc(d, r.Doc, false)
		if err != nil {
			writeError(d.w, err)
			return
		}
		buf.WriteString(`{"ok":`)
		buf.Write(body)
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	writeRawJSON(d.w, 200, buf.Bytes())
}
