package couchapi

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"sync"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// spillThreshold is the attachment size above which a multipart part is
// streamed into the store as it is read (store.DB.StageAttachment)
// instead of held in memory until the document's write: just under the
// store's 1 MiB, from which it keeps data in a file of its own, so that
// data that goes to a file is never held whole.
const spillThreshold = 1<<20 - 1

// partBufSize is the buffer a multipart body is read through.
const partBufSize = 64 << 10

// readMultipartDoc reads a `multipart/related` doc body as the CouchDB
// replicator and PouchDB send it: the JSON doc first, then one part per
// attachment marked "follows" (matched by filename, else in order). Parts
// up to spillThreshold are read into memory, larger ones into db's store
// as they come. cleanup releases what was staged and must be called after
// the write.
func readMultipartDoc(r *http.Request, boundary string, db *store.DB) (*store.Doc, func(), *hooks.Error) {
	if boundary == "" {
		return nil, nil, badRequest("multipart/related without a boundary")
	}
	var staged []*store.Attachment
	var bufs []*[]byte
	cleanup := func() {
		for _, a := range staged {
			db.ReleaseStaged(a)
		}
		for _, b := range bufs {
			partBufs.Put(b)
		}
	}
	// multipart reads through a 4 KiB buffer unless given a larger one:
	// attachment data then came in 4 KiB reads of the connection.
	mr := multipart.NewReader(bufio.NewReaderSize(r.Body, partBufSize), boundary)
	part, err := mr.NextPart()
	if err != nil {
		return nil, cleanup, multipartErr(err)
	}
	head, err := io.ReadAll(part)
	if err != nil {
		return nil, cleanup, multipartErr(err)
	}
	doc, herr := parseDocBody(head)
	if herr != nil {
		return nil, cleanup, herr
	}
	var follows []int
	for i, a := range doc.Attachments {
		if a.Follows {
			follows = append(follows, i)
		}
	}
	next := 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, cleanup, multipartErr(err)
		}
		idx := -1
		if name := part.FileName(); name != "" {
			for _, i := range follows {
				if doc.Attachments[i].Name == name && doc.Attachments[i].Data == nil && doc.Attachments[i].Reader == nil {
					idx = i
					break
				}
			}
		}
		if idx < 0 {
			for next < len(follows) && (doc.Attachments[follows[next]].Data != nil || doc.Attachments[follows[next]].Reader != nil) {
				next++
			}
			if next >= len(follows) {
				return nil, cleanup, badRequest("multipart body has more parts than attachments that follow")
			}
			idx = follows[next]
		}
		a := &doc.Attachments[idx]
		var data io.Reader = part
		if n := declaredLength(a, part.Header); n < 0 || n <= spillThreshold {
			b, pooled, err := readPart(part, n, spillThreshold)
			if err != nil {
				return nil, cleanup, multipartErr(err)
			}
			if pooled != nil {
				// Back to the pool once the write is done: nothing
				// keeps attachment data past it.
				bufs = append(bufs, pooled)
			}
			if len(b) <= spillThreshold {
				a.Data = b
				continue
			}
			data = io.MultiReader(bytes.NewReader(b), part)
		}
		staged = append(staged, a)
		if err := db.StageAttachment(r.Context(), a, data); err != nil {
			var se *store.Error
			if errors.As(err, &se) {
				return nil, cleanup, asCouchError(err)
			}
			return nil, cleanup, multipartErr(err)
		}
		// Staged: no Data or Reader; marked so the matching above
		// treats it as filled.
		a.Reader = stagedData{}
	}
	for _, i := range follows {
		if doc.Attachments[i].Data == nil && doc.Attachments[i].Reader == nil {
			return nil, cleanup, badRequest("attachment " + doc.Attachments[i].Name + " marked follows has no part")
		}
	}
	return doc, cleanup, nil
}

// stagedData stands for data store.DB.StageAttachment already read: the
// store takes the staged data and never reads it.
type stagedData struct{}

func (stagedData) Read([]byte) (int, error) { return 0, io.EOF }

// declaredLength is the length a part's data says it has: the
// attachment's "length" ("encoded_length" when encoded), else the part's
// Content-Length; -1 when neither says.
func declaredLength(a *store.Attachment, h textproto.MIMEHeader) int64 {
	switch {
	case a.Encoding != "" && a.EncodedLength > 0:
		return a.EncodedLength
	case a.Encoding == "" && a.Length > 0:
		return a.Length
	}
	if n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		return n
	}
	return -1
}

// readPartUpTo reads r to its end or to limit+1 bytes, into a buffer
// sized by hint (the declared length, -1: unknown) so that data of the
// declared length is read with one allocation and no copy; a wrong hint
// only costs growth. The result is never nil.
func readPartUpTo(r io.Reader, hint int64, limit int) ([]byte, error) {
	buf, _, err := readPart(r, hint, limit)
	return buf, err
}

// partBufs recycles the buffers of large parts (above pooledPart): the
// server's largest garbage, and zeroed at every allocation.
var partBufs = sync.Pool{New: func() any { b := make([]byte, 0, spillThreshold+1); return &b }}

const pooledPart = 256 << 10

// readPart is readPartUpTo, its buffer from partBufs when it is large;
// pooled, when not nil, goes back to partBufs once the data is written.
func readPart(r io.Reader, hint int64, limit int) (data []byte, pooled *[]byte, err error) {
	size := 4 << 10
	if hint >= 0 {
		// One byte more than declared: EOF is seen without growing.
		size = int(min(hint, int64(limit))) + 1
	}
	var buf []byte
	if size > pooledPart && size <= spillThreshold+1 {
		pooled = partBufs.Get().(*[]byte)
		buf = (*pooled)[:0]
	} else {
		buf = make([]byte, 0, size)
	}
	defer func() {
		if err != nil && pooled != nil {
			partBufs.Put(pooled)
			pooled = nil
		}
	}()
	for len(buf) <= limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), limit+1-len(buf)))
		}
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr == io.EOF {
			return buf, pooled, nil
		}
		if rerr != nil {
			return nil, pooled, rerr
		}
	}
	return buf, pooled, nil
}

func multipartErr(err error) *hooks.Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errTooLarge
	}
	return badRequest("invalid multipart body: " + err.Error())
}

func newBoundary() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// closeParts ends a multipart body written through mw to w as CouchDB ends
// its own: with the close delimiter and nothing after it (wrote: a part
// was written). mime/multipart's Close adds a CRLF, and CouchDB's
// replicator insists that exactly "--" follows the last boundary of an
// open_revs answer: it failed every doc with attachments it fetched from
// minicouch with open_doc_revs_failed.
func closeParts(w io.Writer, mw *multipart.Writer, wrote bool) error {
	end := "--" + mw.Boundary() + "--"
	if wrote {
		end = "\r\n" + end
	}
	_, err := io.WriteString(w, end)
	return err
}

// writeDocParts writes a doc with its wanted attachments as the parts of a
// multipart/related body into mw. As CouchDB, the data goes as it is
// stored (gzipped text with Content-Encoding: gzip, and its encoding in
// the JSON, stubs' too), whatever the client's Accept-Encoding.
func (s *Server) writeDocParts(d *dbReq, mw *multipart.Writer, doc *store.DocRev) error {
	doc.AttEncodingInfo = true
	var js bytes.Buffer
	if err := d.db.WriteDocJSON(d.ctx(), &js, doc, true); err != nil {
		return err
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", "application/json")
	p, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := p.Write(js.Bytes()); err != nil {
		return err
	}
	for _, a := range doc.Attachments {
		if a.Stub {
			continue
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Name}))
		h.Set("Content-Type", a.ContentType)
		if a.Encoding != "" {
			h.Set("Content-Length", strconv.FormatInt(a.EncodedLength, 10))
			h.Set("Content-Encoding", a.Encoding)
		} else {
			h.Set("Content-Length", strconv.FormatInt(a.Length, 10))
		}
		p, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		rc, _, err := d.db.OpenAttachment(d.ctx(), a.Digest)
		if err != nil {
			return err
		}
		_, err = io.Copy(p, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// writeMultipartDoc answers a doc read as multipart/related.
func (s *Server) writeMultipartDoc(d *dbReq, doc *store.DocRev) {
	boundary := newBoundary()
	d.w.Header().Set("Content-Type", `multipart/related; boundary="`+boundary+`"`)
	// As CouchDB: multipart answers carry no Cache-Control.
	d.w.WriteHeader(200)
	mw := multipart.NewWriter(d.w)
	_ = mw.SetBoundary(boundary)
	if err := s.writeDocParts(d, mw, doc); err != nil {
		s.log.Warn("multipart doc write failed", "db", d.name, "id", doc.ID, "error", err)
		return
	}
	_ = closeParts(d.w, mw, true)
}

// writeMixedParts writes open_revs results as multipart/mixed parts: a
// JSON part per revision without attachment data, a nested
// multipart/related part per revision with data, and an error part per
// missing revision.
func (s *Server) writeMixedParts(d *dbReq, mw *multipart.Writer, res []store.OpenRev) error {
	for _, r := range res {
		if r.Doc == nil {
			h := textproto.MIMEHeader{}
			h.Set("Content-Type", `application/json; error="true"`)
			p, err := mw.CreatePart(h)
			if err != nil {
				return err
			}
			p.Write([]byte(`{"missing":`))
			p.Write(jsonobj.AppendString(nil, r.Missing))
			p.Write([]byte(`}`))
			continue
		}
		r.Doc.AttEncodingInfo = true // as CouchDB's multipart answers
		withData := false
		for _, a := range r.Doc.Attachments {
			withData = withData || !a.Stub
		}
		if !withData {
			h := textproto.MIMEHeader{}
			h.Set("Content-Type", "application/json")
			p, err := mw.CreatePart(h)
			if err != nil {
				return err
			}
			if err := d.db.WriteDocJSON(d.ctx(), p, r.Doc, false); err != nil {
				return err
			}
			continue
		}
		inner := newBoundary()
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", `multipart/related; boundary="`+inner+`"`)
		p, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		imw := multipart.NewWriter(p)
		_ = imw.SetBoundary(inner)
		if err := s.writeDocParts(d, imw, r.Doc); err != nil {
			return err
		}
		if err := closeParts(p, imw, true); err != nil {
			return err
		}
	}
	return nil
}

// writeMultipartMixed answers open_revs as multipart/mixed.
func (s *Server) writeMultipartMixed(d *dbReq, res []store.OpenRev) {
	boundary := newBoundary()
	d.w.Header().Set("Content-Type", `multipart/mixed; boundary="`+boundary+`"`)
	// As CouchDB: multipart answers carry no Cache-Control.
	d.w.WriteHeader(200)
	mw := multipart.NewWriter(d.w)
	_ = mw.SetBoundary(boundary)
	if err := s.writeMixedParts(d, mw, res); err != nil {
		s.log.Warn("multipart/mixed write failed", "db", d.name, "error", err)
		return
	}
	_ = closeParts(d.w, mw, len(res) > 0)
}
