package couchapi

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
)

// A plugin's after_doc_read may show a reader a doc under another revision
// than the stored one: the replicator does, to readers who do not own a
// `_replicator` doc with credentials, so that they never learn the
// revision they could write over. Answers that name revisions without a
// body, `_revs_diff` and `_missing_revs`, follow the same view here, for
// readers who are not server admins (server admins see stored revisions:
// `_all_docs` and `_changes` of system dbs are theirs alone).

// renderedRev is the `_rev` of a rendered doc body ("" when it has none).
func renderedRev(body []byte) string {
	var d struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal(body, &d)
	return d.Rev
}

// presentedRev returns the winning revision of doc id as the reader is
// shown it and whether it differs from the stored one; hidden is false
// for a doc that does not exist or is deleted.
func (s *Server) presentedRev(d *dbReq, id string) (shown string, hidden bool, err error) {
	doc, err := d.db.Get(d.ctx(), id, store.GetOptions{})
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	body, err := s.renderDoc(d, doc, false)
	if err != nil {
		return "", false, err
	}
	shown = renderedRev(body)
	return shown, shown != doc.Rev, nil
}

// presentRevsDiff makes diff, the store's answer to a `_revs_diff` of req,
// what the reader may learn: a doc shown to them under another revision
// is diffed against that revision alone, as if it were the doc's only one.
func (s *Server) presentRevsDiff(d *dbReq, req map[string][]string, diff map[string]store.RevsDiff) error {
	if !s.readHooked(d.name) || d.user.IsAdmin() {
		return nil
	}
	for id, revs := range req {
		if strings.HasPrefix(id, store.LocalPrefix) {
			continue
		}
		shown, hidden, err := s.presentedRev(d, id)
		if err != nil {
			return err
		}
		if !hidden {
			continue
		}
		var missing []string
		maxGen, seen := 0, map[string]bool{}
		for _, r := range revs {
			if r == shown || seen[r] {
				continue
			}
			seen[r] = true
			missing = append(missing, r)
			maxGen = max(maxGen, revGen(r))
		}
		if len(missing) == 0 {
			delete(diff, id)
			continue
		}
		rd := store.RevsDiff{Missing: missing}
		if revGen(shown) < maxGen {
			rd.PossibleAncestors = []string{shown}
		}
		diff[id] = rd
	}
	return nil
}

// revGen is the generation of a rev "N-hash", 0 when it has none.
func revGen(rev string) int {
	g, _, _ := strings.Cut(rev, "-")
	n, _ := strconv.Atoi(g)
	return n
}
