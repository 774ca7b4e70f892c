package host

import (
	"encoding/json"
	"net/http"
	"strings"
)

// A plugin's after_doc_read may show a reader a doc changed, even under
// another revision (the replicator hides endpoint credentials and the
// stored revision from readers who do not own a replication doc). The
// middleware can pass a single doc through it, not the docs and revisions
// inside lists, feeds, queries and diffs, nor whatever a design doc's
// functions make of them. So a non-admin may, on a db whose reads are
// filtered, do only what is listed here: everything else is refused
// (403), whatever its parameters or body say, rather than trying to spot
// the forms that reveal docs or revisions.

// nonAdminMay reports whether a non-admin may send r to a db whose docs
// pass after_doc_read (segs: its path; _local docs are dealt with before).
func nonAdminMay(r *http.Request, segs []string) bool {
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	write := r.Method == http.MethodPut || r.Method == http.MethodDelete
	switch {
	case len(segs) == 1:
		return read || r.Method == http.MethodPost
	case !strings.HasPrefix(segs[1], "_"):
		// The doc (read through after_doc_read), writes (through
		// before_doc_update) and its attachments (without ETag).
		return write || read && (len(segs) > 2 || !asksRevisions(r))
	case segs[1] == "_design":
		// The design doc itself and its attachments, not its functions.
		return len(segs) == 3 && (read || write) || len(segs) == 4 && read && !strings.HasPrefix(segs[3], "_")
	case len(segs) == 2:
		switch segs[1] {
		case "_security", "_revs_limit", "_purged_infos_limit":
			return read || r.Method == http.MethodPut
		case "_bulk_docs", "_purge", "_ensure_full_commit", "_compact", "_view_cleanup":
			return r.Method == http.MethodPost
		}
	}
	return false
}

// asksRevisions reports whether a doc read asks for the doc under several
// revisions at once (open_revs), which the server answers in a form that
// does not pass through after_doc_read. Parameter names are compared
// without case, as some servers do.
func asksRevisions(r *http.Request) bool {
	for k := range r.URL.Query() {
		if strings.EqualFold(k, "open_revs") {
			return true
		}
	}
	return false
}

// designFunction reports whether segs is a design doc function that may
// write docs (_update, _rewrite): it passes no doc through
// before_doc_update.
func designFunction(segs []string) bool {
	return len(segs) >= 4 && segs[1] == "_design" && (segs[3] == "_update" || segs[3] == "_rewrite")
}

// docRev is the _rev of a doc body ("" when it has none).
func docRev(doc []byte) string {
	var d struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal(doc, &d)
	return d.Rev
}

// noETag passes a response through without its ETag header.
type noETag struct {
	http.ResponseWriter
	wrote bool
}

func (n *noETag) WriteHeader(status int) {
	if !n.wrote {
		n.wrote = true
		n.ResponseWriter.Header().Del("ETag")
	}
	n.ResponseWriter.WriteHeader(status)
}

func (n *noETag) Write(b []byte) (int, error) {
	if !n.wrote {
		n.WriteHeader(http.StatusOK)
	}
	return n.ResponseWriter.Write(b)
}
