package replicate

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// bulkFlushBytes is the buffered size above which docs are written (3.x: 4 MiB).
const bulkFlushBytes = 4 << 20

// bulkWriter buffers docs without attachments and writes them to the target
// with `_bulk_docs` `{"new_edits":false}`.
type bulkWriter struct {
	r    *run
	mu   sync.Mutex // add is called by the docs a worker fetches at once (fetchEach)
	docs []json.RawMessage
	size int
}

// add buffers doc, flushing first when the buffer would exceed the limit.
func (w *bulkWriter) add(ctx context.Context, doc json.RawMessage) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.size+len(doc) > bulkFlushBytes && len(w.docs) > 0 {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	w.docs = append(w.docs, doc)
	w.size += len(doc) + 1
	return nil
}

// flush writes the buffered docs.
func (w *bulkWriter) flush(ctx context.Context) error {
	if len(w.docs) == 0 {
		return nil
	}
	docs := w.docs
	w.docs, w.size = nil, 0
	return w.write(ctx, docs)
}

// write posts docs; 413 splits the list in halves, a single doc still too
// large is skipped and counted. Docs the target refuses are counted
// (docWriteFailed); with doc_write_failure "fail" the first one's error is
// returned, once the answer is read.
func (w *bulkWriter) write(ctx context.Context, docs []json.RawMessage) error {
	body := &docsBody{docs: docs}
	tgt := w.r.tgt
	resp, err := tgt.Do(ctx, &couchclient.Request{Buffer: true, Turn: true,
		Method: http.MethodPost, Path: "_bulk_docs", GetBody: body.open, ContentLength: body.size(),
		Header: http.Header{"Content-Type": {"application/json"}, "X-Couch-Full-Commit": {"false"}},
	})
	body.detach()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK, http.StatusExpectationFailed:
	case http.StatusRequestEntityTooLarge:
		if len(docs) == 1 {
			id, rev := docIDRev(docs[0])
			errName, reason := couchErrorBody(resp)
			if errName == "" {
				errName, reason = "too_large", "the request entity is too large"
			}
			return w.r.docWriteFailed(FailedDoc{ID: id, Rev: rev, Status: http.StatusRequestEntityTooLarge, Error: errName, Reason: reason})
		}
		drainClose(resp)
		half := len(docs) / 2
		if err := w.write(ctx, docs[:half]); err != nil {
			return err
		}
		return w.write(ctx, docs[half:])
	default:
		return statusError("bulk_docs_failed", resp, "POST", tgt.RedactedURL()+"_bulk_docs")
	}
	var results []struct {
		ID     string `json:"id"`
		Rev    string `json:"rev"`
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&results); err != nil {
		return newError("bulk_docs_failed", "invalid _bulk_docs response from "+tgt.RedactedURL()+": "+err.Error(), false)
	}
	failed := 0
	var sent sentRevs
	var firstErr error
	for _, res := range results {
		if res.Error == "" {
			continue
		}
		failed++
		rev := res.Rev // CouchDB names it; others may not
		if rev == "" {
			if sent == nil {
				sent = newSentRevs(docs)
			}
			rev = sent.take(res.ID)
		}
		err := w.r.docWriteFailed(FailedDoc{ID: res.ID, Rev: rev, Status: bulkErrorStatus(res.Error), Error: res.Error, Reason: res.Reason})
		if firstErr == nil {
			firstErr = err
		}
	}
	w.r.stats.docsWritten.Add(int64(len(docs) - failed))
	return firstErr
}

// couchErrorBody reads the "error" and "reason" of a short CouchDB error
// answer and closes it ("" when it has none).
func couchErrorBody(resp *http.Response) (errName, reason string) {
	var v struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&v)
	drainClose(resp)
	return v.Error, v.Reason
}

// sentRevs finds the revision of a refused doc in what was sent, when
// the answer does not name it: the revisions of each id in the order
// sent, taken one per refusal.
type sentRevs map[string][]string

func newSentRevs(docs []json.RawMessage) sentRevs {
	s := sentRevs{}
	for _, d := range docs {
		id, rev := docIDRev(d)
		s[id] = append(s[id], rev)
	}
	return s
}

func (s sentRevs) take(id string) string {
	revs := s[id]
	if len(revs) == 0 {
		return ""
	}
	s[id] = revs[1:]
	return revs[0]
}

// docIDRev extracts _id and _rev from a doc body (for refused docs).
func docIDRev(doc json.RawMessage) (id, rev string) {
	var v struct {
		ID  string `json:"_id"`
		Rev string `json:"_rev"`
	}
	if json.Unmarshal(doc, &v) != nil {
		return "", "" // reported without an id rather than not at all
	}
	return v.ID, v.Rev
}
