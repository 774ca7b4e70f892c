package couchapi

import (
	"io"
	"net/url"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
)

// copyDoc serves COPY /{db}/{id}: the source revision (?rev= or the
// winner) with its attachments is written to the id in the Destination
// header, whose optional ?rev= names the destination revision to replace.
// The attachments keep their stored bytes, encoding and digest, as
// CouchDB copies them within a shard: one stored uncompressed is not
// compressed now even if the settings would compress it today.
func (s *Server) copyDoc(d *dbReq, id string) {
	dest := d.r.Header.Get("Destination")
	if dest == "" {
		writeError(d.w, badRequest("Destination header is mandatory for COPY."))
		return
	}
	destID, destRev, _ := strings.Cut(dest, "?rev=")
	if u, err := url.PathUnescape(destID); err == nil {
		destID = u
	}
	if herr := s.checkDocID(destID); herr != nil {
		writeError(d.w, herr)
		return
	}
	if strings.HasPrefix(dest, "http://") || strings.HasPrefix(dest, "https://") {
		writeError(d.w, badRequest("Destination URL must be relative."))
		return
	}
	rev := d.query("rev")
	if rev != "" && !validRev(rev) {
		writeError(d.w, errBadRev)
		return
	}
	src, err := d.db.Get(d.ctx(), id, store.GetOptions{Rev: rev, Attachments: true})
	if err != nil {
		writeError(d.w, err)
		return
	}
	doc := &store.Doc{ID: destID, Rev: destRev, Body: src.Body}
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for _, a := range src.Attachments {
		rc, _, err := d.db.OpenAttachment(d.ctx(), a.Digest)
		if err != nil {
			writeError(d.w, err)
			return
		}
		closers = append(closers, rc)
		doc.Attachments = append(doc.Attachments, store.Attachment{Name: a.Name, ContentType: a.ContentType,
			Reader: rc, Length: a.Length, Encoding: a.Encoding, EncodedLength: a.EncodedLength, AsStored: true})
	}
	s.writeOne(d, doc, true, 201)
}
