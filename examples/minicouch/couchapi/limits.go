package couchapi

import (
	"strconv"
	"unicode/utf8"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonscan"
)

// maxDocDepth bounds how deeply a document's objects and arrays nest.
// JSON readers stop at jsonscan.MaxDepth, and a doc travels wrapped: in a
// _bulk_docs body (2 levels), an open_revs answer (2), a _bulk_get answer
// (5), include_docs rows (3). A doc a direct write accepted must fit in
// each, or a replication of it fails at every retry. (CouchDB has no such
// bound.)
const maxDocDepth = jsonscan.MaxDepth - 8

// errDocTooDeep refuses a document nested deeper than maxDocDepth.
var errDocTooDeep = badRequest("JSON nested too deeply: a document nests objects and arrays more than " +
	strconv.Itoa(maxDocDepth) + " levels deep")

// validDocJSON checks a body holding documents nested wrap levels deep
// (0: the body is one doc): valid UTF-8 JSON with no doc deeper than
// maxDocDepth, else the error to answer.
func validDocJSON(b []byte, wrap int) *hooks.Error {
	if utf8.Valid(b) && jsonValidDepth(b, maxDocDepth+wrap) {
		return nil
	}
	if validJSON(b) {
		return errDocTooDeep
	}
	return jsonError(b)
}

// docLimits are the bounds every doc write enforces, whatever the path
// (PUT, POST, multipart PUT, _bulk_docs, COPY) and with new_edits=false
// as without: a replicator writing to minicouch meets the same limits
// as a client writing directly.
type docLimits struct {
	maxDoc int64 // `[couchdb] max_document_size`: bytes of a doc's body
	maxAtt int64 // `[couchdb] max_attachment_size`; negative: none
	maxID  int   // `[couchdb] max_document_id_length`; 0: none
}

// limits reads the bounds from the live configuration, as CouchDB reads
// its config at every write.
func (s *Server) limits() docLimits {
	return docLimits{
		maxDoc: s.cfg.Int("couchdb", "max_document_size", 8000000),
		maxAtt: maxAttachmentSize(s.cfg),
		maxID:  maxDocIDLength(s.cfg),
	}
}

// check refuses the whole request at the first doc, in order, that
// breaks a bound, as CouchDB 3.5's couch_doc:from_json_obj_validate does
// for each doc of a request before writing any (a `_bulk_docs` answers
// 413 or 400 as a whole, not an error per doc): its id's length, then
// its body's size, then each attachment's.
func (l docLimits) check(docs []*store.Doc) *hooks.Error {
	for _, d := range docs {
		if herr := l.checkDoc(d); herr != nil {
			return herr
		}
	}
	return nil
}

func (l docLimits) checkDoc(d *store.Doc) *hooks.Error {
	if l.maxID > 0 && len(d.ID) > l.maxID {
		return errDocIDTooLong
	}
	if int64(len(d.Body)) > l.maxDoc {
		return &hooks.Error{Status: 413, Err: "document_too_large", Reason: d.ID}
	}
	if l.maxAtt < 0 {
		return nil
	}
	for _, a := range d.Attachments {
		// Inline or already read data by its length, data that follows
		// and stubs by the length they declare, and an encoded one (a
		// gzip part, as a replicator sends a compressible attachment)
		// by the larger of its encoded and decoded lengths: the same
		// bytes are refused whether they come plain (a direct PUT) or
		// gzipped (a replication), where CouchDB 3.5's att_len counts
		// only the encoded ones. Data streamed from a temp file is
		// counted again as the store reads it.
		n := a.Length
		switch {
		case a.Data != nil:
			n = max(int64(len(a.Data)), a.Length)
		case a.Encoding != "" && a.EncodedLength > 0:
			n = max(a.EncodedLength, a.Length)
		}
		if n > l.maxAtt {
			return asCouchError(store.AttachmentTooLarge(a.Name))
		}
	}
	return nil
}
