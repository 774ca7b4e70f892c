package couchapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"mime/multipart"
	"net/textproto"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// bulkDocs is POST /{db}/_bulk_docs.
func (s *Server) bulkDocs(d *dbReq) {
	if herr := requireJSONType(d.r); herr != nil {
		writeError(d.w, herr)
		return
	}
	raw, herr := readBodyRecycled(d.r)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	// The docs' bodies are built in raw's memory: it goes back for reuse
	// only once the docs are written and the answer is sent.
	defer releaseBody(raw)
	// The docs are 2 levels deep: {"docs":[…]}.
	if herr := validDocJSON(raw, 2); herr != nil {
		writeError(d.w, herr)
		return
	}
	// One validation pass over the whole body; the docs are then found by
	// scanning and parsed without validating each again.
	raws, newEditsP, ok := splitBulkDocs(raw)
	if !ok {
		raws, newEditsP, herr = decodeBulkDocs(raw)
		if herr != nil {
			writeError(d.w, herr)
			return
		}
	}
	newEdits := newEditsP == nil || *newEditsP
	docs := make([]*store.Doc, 0, len(raws))
	lim := s.limits()
	// Each doc's body is built in place over its bytes of the request
	// body, which nothing reads again.
	for _, raw := range raws {
		doc, err := parseValidDocInPlace(raw)
		if err != nil {
			writeError(d.w, err)
			return
		}
		// Each doc is checked against the limits as it is parsed, before
		// the checks of its revisions, in CouchDB's order.
		if herr := lim.checkDoc(doc); herr != nil {
			writeError(d.w, herr)
			return
		}
		// As CouchDB, a missing revision is named before a missing id.
		if !newEdits && doc.Revisions == nil && doc.Rev == "" && !strings.HasPrefix(doc.ID, store.LocalPrefix) {
			writeError(d.w, badRequest("When `new_edits: false`, the document needs `_rev` or `_revisions` specified"))
			return
		}
		if doc.ID == "" {
			if !newEdits {
				writeError(d.w, badRequest("Document id must be a string"))
				return
			}
			doc.ID = auth.NewSalt()
		}
		if herr := checkDesignWrite(d, doc.ID); herr != nil {
			writeError(d.w, herr)
			return
		}
		if herr := validateDesignDoc(doc); herr != nil {
			writeError(d.w, herr)
			return
		}
		docs = append(docs, doc)
	}
	res, err := s.writeDocs(d.ctx(), d.db, docs, writeOpts{newEdits: newEdits, user: d.user})
	if err != nil {
		writeError(d.w, err)
		return
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	n := 0
	for _, r := range res {
		if r.Err == nil && !newEdits {
			continue
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		if r.Err != nil {
			buf.WriteString(`{"id":`)
			buf.Write(jsonobj.AppendString(nil, r.ID))
			buf.WriteString(`,"error":`)
			buf.Write(jsonobj.AppendString(nil, r.Err.Err))
			buf.WriteString(`,"reason":`)
			buf.Write(jsonobj.AppendString(nil, r.Err.Reason))
			buf.WriteByte('}')
			continue
		}
		buf.WriteString(`{"ok":true,"id":`)
		buf.Write(jsonobj.AppendString(nil, r.ID))
		buf.WriteString(`,"rev":`)
		buf.Write(jsonobj.AppendString(nil, r.Rev))
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	writeRawJSON(d.w, 201, buf.Bytes())
}

// decodeBulkDocs decodes a _bulk_docs body (valid JSON) of a shape
// splitBulkDocs leaves to encoding/json, with CouchDB's errors.
func decodeBulkDocs(raw []byte) ([][]byte, *bool, *hooks.Error) {
	var body struct {
		Docs     *[]json.RawMessage `json:"docs"`
		NewEdits *bool              `json:"new_edits"`
	}
	if herr := decodeJSON(raw, &body); herr != nil {
		var probe struct {
			Docs json.RawMessage `json:"docs"`
		}
		if herr != errInvalidJSON && json.Unmarshal(raw, &probe) == nil && probe.Docs != nil {
			return nil, nil, badRequest("`docs` parameter must be an array.")
		}
		return nil, nil, herr
	}
	if body.Docs == nil {
		return nil, nil, badRequest("POST body must include `docs` parameter.")
	}
	raws := make([][]byte, len(*body.Docs))
	for i, d := range *body.Docs {
		raws[i] = d
	}
	return raws, body.NewEdits, nil
}

// bulkGetItem is one entry of a _bulk_get request.
type bulkGetItem struct {
	ID        any      `json:"id"`
	Rev       string   `json:"rev"`
	AttsSince []string `json:"atts_since"`
}

// bulkGetError is a _bulk_get error object, in CouchDB's key order. Rev
// and ID are strings, or nil (null) for an entry without an id.
type bulkGetError struct {
	Rev    any    `json:"rev"`
	Reason string `json:"reason"`
	ID     any    `json:"id"`
	Error  string `json:"error"`
}

// bulkGetResult is the outcome of one _bulk_get entry.
type bulkGetResult struct {
	id   string
	noID bool // the entry had no id: the result's id is null
	revs []store.OpenRev
	err  *bulkGetError
	errs []*bulkGetError // per missing rev
}

// bulkGet is POST /{db}/_bulk_get (JSON, or multipart/mixed when accepted).
func (s *Server) bulkGet(d *dbReq) {
	var body struct {
		Docs *[]bulkGetItem `json:"docs"`
	}
	if herr := readJSONRequest(d.r, &body); herr != nil {
		writeError(d.w, herr)
		return
	}
	if body.Docs == nil {
		writeError(d.w, badRequest("Missing JSON list of 'docs'."))
		return
	}
	base, herr := docOptions(d.r.URL.Query())
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	base.Rev = ""
	base = revOptions(base)
	results := bulkGetAll(d, *body.Docs, base)
	if acceptsMultipart(d.r, "multipart/mixed") && !s.readHooked(d.name) {
		s.writeBulkGetMultipart(d, results)
		return
	}
	setJSONHeaders(d.w)
	d.w.WriteHeader(200)
	buf := bufio.NewWriterSize(d.w, 64<<10)
	buf.WriteString(`{"results":[`)
	for i, r := range results {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"id":`)
		if r.noID {
			buf.WriteString("null")
		} else {
			buf.Write(jsonobj.AppendString(nil, r.id))
		}
		buf.WriteString(`,"docs":[`)
		n := 0
		sep := func() {
			if n > 0 {
				buf.WriteByte(',')
			}
			n++
		}
		if r.err != nil {
			sep()
			e, _ := jsonobj.Marshal(map[string]*bulkGetError{"error": r.err})
			buf.Write(e)
		}
		for j, or := range r.revs {
			sep()
			if or.Doc == nil {
				e, _ := jsonobj.Marshal(map[string]*bulkGetError{"error": r.errs[j]})
				buf.Write(e)
				continue
			}
			buf.WriteString(`{"ok":`)
			if err := s.writeDoc(d, buf, or.Doc); err != nil {
				s.log.Warn("_bulk_get: rendering a doc failed", "db", d.name, "id", r.id, "error", err)
				return
			}
			buf.WriteByte('}')
		}
		buf.WriteString(`]}`)
	}
	buf.WriteString("]}\n")
	_ = buf.Flush()
}

// bulkGetRequest turns one _bulk_get entry into a store read, or into its
// error result when the entry cannot be read (no string id, invalid rev).
func bulkGetRequest(item bulkGetItem, base store.GetOptions) (store.OpenRevsRequest, *bulkGetResult) {
	if item.ID == nil {
		// CouchDB's answer to an entry without an id (or with "id": null).
		return store.OpenRevsRequest{}, &bulkGetResult{noID: true, err: &bulkGetError{Reason: "document id missed", Error: "bad_request"}}
	}
	id, ok := item.ID.(string)
	if !ok || id == "" {
		rev := item.Rev
		if rev == "" {
			rev = "undefined"
		}
		return store.OpenRevsRequest{}, &bulkGetResult{id: id, err: &bulkGetError{Rev: rev, Reason: "missing", ID: id, Error: "not_found"}}
	}
	opts := base
	if item.AttsSince != nil {
		opts.AttsSince = item.AttsSince
	}
	var revs []string
	if item.Rev != "" {
		if !validRev(item.Rev) {
			return store.OpenRevsRequest{}, &bulkGetResult{id: id, err: &bulkGetError{Rev: item.Rev, Reason: "Invalid rev format", ID: id, Error: "bad_request"}}
		}
		revs = []string{item.Rev}
	}
	return store.OpenRevsRequest{ID: id, Revs: revs, Opts: opts}, nil
}

// bulkGetOutcome is the result of one _bulk_get entry from its store read.
func bulkGetOutcome(item bulkGetItem, id string, res []store.OpenRev, err error) bulkGetResult {
	if err != nil {
		rev := item.Rev
		if rev == "" {
			rev = "undefined"
		}
		ce := asCouchError(err)
		if errors.Is(err, store.ErrNotFound) {
			ce = errMissing
		}
		return bulkGetResult{id: id, err: &bulkGetError{Rev: rev, Reason: ce.Reason, ID: id, Error: ce.Err}}
	}
	out := bulkGetResult{id: id, revs: res, errs: make([]*bulkGetError, len(res))}
	for i, r := range res {
		if r.Doc == nil {
			out.errs[i] = &bulkGetError{Rev: r.Missing, Reason: "missing", ID: id, Error: "not_found"}
		}
	}
	return out
}

// bulkGetAll reads every entry of a _bulk_get request in one store
// transaction, answering in request order.
func bulkGetAll(d *dbReq, items []bulkGetItem, base store.GetOptions) []bulkGetResult {
	results := make([]bulkGetResult, len(items))
	reqs := make([]store.OpenRevsRequest, 0, len(items))
	at := make([]int, 0, len(items)) // index in items of each read
	for i, item := range items {
		req, early := bulkGetRequest(item, base)
		if early != nil {
			results[i] = *early
			continue
		}
		reqs = append(reqs, req)
		at = append(at, i)
	}
	for j, res := range d.db.OpenRevsMany(d.ctx(), reqs) {
		i := at[j]
		results[i] = bulkGetOutcome(items[i], reqs[j].ID, res.Revs, res.Err)
	}
	return results
}

// writeBulkGetMultipart answers _bulk_get as multipart/mixed: one part per
// revision (JSON, or multipart/related with attachment data) and an error
// JSON part per missing doc or revision.
func (s *Server) writeBulkGetMultipart(d *dbReq, results []bulkGetResult) {
	boundary := newBoundary()
	d.w.Header().Set("Content-Type", `multipart/mixed; boundary="`+boundary+`"`)
	// As CouchDB: multipart answers carry no Cache-Control.
	d.w.WriteHeader(200)
	mw := multipart.NewWriter(d.w)
	_ = mw.SetBoundary(boundary)
	wrote := false
	writeErr := func(e *bulkGetError) error {
		wrote = true
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", `application/json; error="true"`)
		p, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		b, _ := jsonobj.Marshal(e)
		_, err = p.Write(b)
		return err
	}
	for _, r := range results {
		if r.err != nil {
			if writeErr(r.err) != nil {
				return
			}
			continue
		}
		for j, or := range r.revs {
			if or.Doc == nil {
				if writeErr(r.errs[j]) != nil {
					return
				}
				continue
			}
			wrote = true
			if err := s.writeMixedParts(d, mw, []store.OpenRev{or}); err != nil {
				s.log.Warn("_bulk_get multipart write failed", "db", d.name, "error", err)
				return
			}
		}
	}
	_ = closeParts(d.w, mw, wrote)
}

// revsDiff is POST /{db}/_revs_diff.
func (s *Server) revsDiff(d *dbReq) {
	var req map[string][]string
	if herr := readJSONRequest(d.r, &req); herr != nil {
		writeError(d.w, herr)
		return
	}
	for _, revs := range req {
		for _, r := range revs {
			if !validRev(r) {
				writeError(d.w, errBadRev)
				return
			}
		}
	}
	res, err := d.db.RevsDiff(d.ctx(), req)
	if err == nil {
		if res == nil {
			res = map[string]store.RevsDiff{}
		}
		err = s.presentRevsDiff(d, req, res)
	}
	if err != nil {
		writeError(d.w, err)
		return
	}
	writeJSON(d.w, 200, res)
}

// missingRevs is POST /{db}/_missing_revs.
func (s *Server) missingRevs(d *dbReq) {
	var req map[string][]string
	if herr := readJSONRequest(d.r, &req); herr != nil {
		writeError(d.w, herr)
		return
	}
	res, err := d.db.RevsDiff(d.ctx(), req)
	if err == nil {
		if res == nil {
			res = map[string]store.RevsDiff{}
		}
		err = s.presentRevsDiff(d, req, res)
	}
	if err != nil {
		writeError(d.w, err)
		return
	}
	out := map[string][]string{}
	for id, r := range res {
		out[id] = r.Missing
	}
	writeJSON(d.w, 200, map[string]any{"missing_revs": out})
}
