package couchapi

import (
	"crypto/md5"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
)

// serveAttachment is `/{db}/{id}/{name}`: GET/HEAD streams the data,
// PUT stores a new attachment (streamed), DELETE removes it.
func (s *Server) serveAttachment(d *dbReq, id, name string) {
	if strings.HasPrefix(id, store.LocalPrefix) {
		writeError(d.w, badRequest("_local documents do not accept attachments."))
		return
	}
	switch d.r.Method {
	case "GET", "HEAD":
		s.getAttachment(d, id, name)
	case "PUT":
		s.putAttachment(d, id, name)
	case "DELETE":
		s.deleteAttachment(d, id, name)
	default:
		writeError(d.w, methodNotAllowed("DELETE,GET,HEAD,PUT"))
	}
}

func digestMD5(digest string) string {
	return strings.TrimPrefix(digest, "md5-")
}

func (s *Server) getAttachment(d *dbReq, id, name string) {
	rev := d.query("rev")
	if rev != "" && !validRev(rev) {
		writeError(d.w, errBadRev)
		return
	}
	info, err := d.db.GetAttachment(d.ctx(), id, rev, name)
	if err != nil {
		writeError(d.w, err)
		return
	}
	etag := `"` + digestMD5(info.Digest) + `"`
	if d.r.Header.Get("If-None-Match") == etag {
		d.w.Header().Set("ETag", etag)
		d.w.WriteHeader(http.StatusNotModified)
		return
	}
	h := d.w.Header()
	h.Set("ETag", etag)
	h.Set("Content-Type", info.ContentType)
	h.Set("Cache-Control", "must-revalidate")
	// As CouchDB: data stored encoded goes out as stored when the client
	// accepts the encoding, else decoded on the fly (with the decoded
	// length when it is known, chunked when it was uploaded encoded).
	status, first, n := 200, int64(0), info.Length
	sendStored := info.Encoding != "gzip" || acceptsGzip(d.r)
	if info.Encoding != "" {
		h.Set("Accept-Ranges", "none")
		switch {
		case sendStored:
			h.Set("Content-Encoding", info.Encoding)
			n = info.EncodedLength
		case info.Length == info.EncodedLength:
			n = -1
		}
	} else {
		h.Set("Accept-Ranges", "bytes")
		if rg := d.r.Header.Get("Range"); rg != "" {
			from, to, ok := parseRange(rg, info.Length)
			if !ok {
				h.Set("Content-Range", "bytes */"+strconv.FormatInt(info.Length, 10))
				writeError(d.w, &hooks.Error{Status: 416, Err: "requested_range_not_satisfiable", Reason: "Requested range not satisfiable"})
				return
			}
			if from >= 0 {
				status, first, n = 206, from, to-from+1
				h.Set("Content-Range", "bytes "+strconv.FormatInt(from, 10)+"-"+strconv.FormatInt(to, 10)+"/"+strconv.FormatInt(info.Length, 10))
			}
		}
	}
	switch {
	case n >= 0:
		h.Set("Content-Length", strconv.FormatInt(n, 10))
	case d.r.Method == "HEAD":
		// CouchDB's HEAD of what it would send chunked
		h.Set("Content-Length", "0")
	default:
		// chunked whatever the size, as CouchDB: without this Go's
		// server measures a body that fits its buffer and sends a
		// Content-Length
		h.Set("Transfer-Encoding", "chunked")
	}
	if d.r.Method == "HEAD" {
		d.w.WriteHeader(status)
		return
	}
	var rc io.ReadCloser
	if sendStored {
		rc, _, err = d.db.OpenAttachment(d.ctx(), info.Digest)
	} else {
		rc, err = d.db.OpenAttachmentDecoded(d.ctx(), info)
	}
	if err != nil {
		writeError(d.w, err)
		return
	}
	defer rc.Close()
	if first > 0 {
		if _, err := io.CopyN(io.Discard, rc, first); err != nil {
			writeError(d.w, err)
			return
		}
	}
	d.w.WriteHeader(status)
	if n < 0 {
		_, err = io.Copy(d.w, rc)
	} else {
		_, err = io.CopyN(d.w, rc, n)
	}
	if err != nil {
		s.log.Debug("attachment stream ended early", "db", d.name, "id", id, "error", err)
	}
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip,
// as mochiweb's accepted_encodings reads it for CouchDB: "gzip" or "*"
// with a q-value above 0, unless gzip itself has q=0. A header it cannot
// read takes nothing but identity (CouchDB answers 500).
func acceptsGzip(r *http.Request) bool {
	gzip, star := -1.0, -1.0
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, item := range strings.Split(strings.ToLower(v), ",") {
			coding, params, _ := strings.Cut(item, ";")
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || strings.TrimSpace(k) != "q" {
					continue
				}
				f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || f < 0 || f > 1 {
					return false
				}
				q = f
			}
			switch strings.TrimSpace(coding) {
			case "gzip":
				gzip = q
			case "*":
				star = q
			}
		}
	}
	if gzip >= 0 {
		return gzip > 0
	}
	return star > 0
}

// parseRange parses a single-range "bytes=a-b", "bytes=a-" or "bytes=-n"
// header against size. from is -1 (serve everything) for forms it does not
// handle (several ranges); ok is false for an unsatisfiable range.
func parseRange(h string, size int64) (from, to int64, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return -1, -1, true
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return -1, -1, true
	}
	var err error
	switch {
	case a == "":
		var last int64
		if last, err = strconv.ParseInt(b, 10, 64); err != nil || last <= 0 {
			return 0, 0, false
		}
		from, to = max(size-last, 0), size-1
	default:
		if from, err = strconv.ParseInt(a, 10, 64); err != nil || from < 0 {
			return -1, -1, true
		}
		to = size - 1
		if b != "" {
			if to, err = strconv.ParseInt(b, 10, 64); err != nil || to < from {
				return -1, -1, true
			}
			to = min(to, size-1)
		}
	}
	if size == 0 || from >= size {
		return 0, 0, false
	}
	return from, to, true
}

// attachmentRev returns the rev an attachment write edits: ?rev= or If-Match.
func attachmentRev(d *dbReq) string {
	if rev := d.query("rev"); rev != "" {
		return rev
	}
	return strings.Trim(d.r.Header.Get("If-Match"), `"`)
}

// checkAttachmentWrite runs before_doc_update for an attachment write on a
// subscribed db with the doc as it will be (the new attachment as a stub).
func (s *Server) checkAttachmentWrite(d *dbReq, id, rev, name string, deleting bool) error {
	if s.hooks == nil || !s.hooks.Subscribed(hooks.BeforeDocUpdate, d.name) {
		return nil
	}
	doc := &store.Doc{ID: id, Rev: rev, Body: []byte("{}")}
	if rev != "" {
		if cur, err := d.db.Get(d.ctx(), id, store.GetOptions{Rev: rev}); err == nil {
			doc.Body = cur.Body
			for _, a := range cur.Attachments {
				if a.Name != name {
					doc.Attachments = append(doc.Attachments, store.Attachment{Name: a.Name, ContentType: a.ContentType, Stub: true, Digest: a.Digest, RevPos: a.RevPos})
				}
			}
		}
	}
	if !deleting {
		doc.Attachments = append(doc.Attachments, store.Attachment{Name: name, ContentType: d.r.Header.Get("Content-Type")})
	}
	_, err := s.hooks.BeforeDocUpdate(d.ctx(), d.name, renderDocForHook(doc), d.user)
	return err
}

func (s *Server) putAttachment(d *dbReq, id, name string) {
	if herr := checkDesignWrite(d, id); herr != nil {
		writeError(d.w, herr)
		return
	}
	if herr := s.checkDocID(id); herr != nil {
		writeError(d.w, herr)
		return
	}
	rev := attachmentRev(d)
	if rev != "" && !validRev(rev) {
		writeError(d.w, errBadRev)
		return
	}
	if err := s.checkAttachmentWrite(d, id, rev, name, false); err != nil {
		writeError(d.w, err)
		return
	}
	ct := d.r.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/octet-stream"
	}
	md5hdr := ""
	if v := d.r.Header.Get("Content-MD5"); v != "" {
		if raw, err := base64.StdEncoding.DecodeString(v); err != nil || len(raw) != md5.Size {
			writeError(d.w, &hooks.Error{Status: 400, Err: "content_md5_mismatch", Reason: "Possible message corruption."})
			return
		}
		md5hdr = "md5-" + v
	}
	// A gzip upload is stored as it comes, encoded (limitBody made the
	// body read inflated: the raw body is underneath); CouchDB takes no
	// other encoding.
	var body io.Reader = d.r.Body
	encoding, declared := "", d.r.ContentLength
	if gb, ok := d.r.Body.(*gzipBody); ok {
		body, encoding, declared = gb.raw, "gzip", gb.declared
	} else if enc := contentEncoding(d.r); enc != "" {
		writeError(d.w, &hooks.Error{Status: 415, Err: "bad_content_type", Reason: "Only gzip and identity content-encodings are supported"})
		return
	}
	if body == nil {
		body = strings.NewReader("")
	}
	if max := maxAttachmentSize(s.cfg); max >= 0 && declared > max {
		writeError(d.w, store.AttachmentTooLarge(name))
		return
	}
	newRev, err := d.db.PutAttachment(d.ctx(), id, rev, store.Attachment{Name: name, ContentType: ct, Reader: body, Digest: md5hdr, Encoding: encoding, Length: declaredIdentity(encoding, declared), EncodedLength: declaredEncoded(encoding, declared)})
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(d.w, errTooLarge)
			return
		}
		writeError(d.w, err)
		return
	}
	s.dbUpdated(d.db)
	s.afterWrite(d.ctx(), d.db, id)
	// As CouchDB: a Location and no ETag.
	d.w.Header().Set("Location", docURL(d, id)+"/"+couchURLEncode(name))
	writeJSON(d.w, 201, struct {
		OK  bool   `json:"ok"`
		ID  string `json:"id"`
		Rev string `json:"rev"`
	}{true, id, newRev})
}

func (s *Server) deleteAttachment(d *dbReq, id, name string) {
	if herr := checkDesignWrite(d, id); herr != nil {
		writeError(d.w, herr)
		return
	}
	rev := attachmentRev(d)
	if rev == "" {
		writeError(d.w, hooks.Conflict())
		return
	}
	if !validRev(rev) {
		writeError(d.w, errBadRev)
		return
	}
	if err := s.checkAttachmentWrite(d, id, rev, name, true); err != nil {
		writeError(d.w, err)
		return
	}
	newRev, err := d.db.DeleteAttachment(d.ctx(), id, rev, name)
	if err != nil {
		writeError(d.w, err)
		return
	}
	s.dbUpdated(d.db)
	s.afterWrite(d.ctx(), d.db, id)
	writeJSON(d.w, 200, struct {
		OK  bool   `json:"ok"`
		ID  string `json:"id"`
		Rev string `json:"rev"`
	}{true, id, newRev})
}

// declaredIdentity and declaredEncoded place a body's declared length
// (-1: none) where store.Attachment says the length of data in that
// encoding goes (the store writes large data straight to a file).
func declaredIdentity(encoding string, n int64) int64 {
	if encoding != "" {
		return 0
	}
	return max(n, 0)
}

func declaredEncoded(encoding string, n int64) int64 {
	if encoding == "" {
		return 0
	}
	return max(n, 0)
}
