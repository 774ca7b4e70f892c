package replicate

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// bulkFlushBytes is the buffered size above which docs are written (3.x: 4 MiB).
const bulkFlushBytes = 4 << 20

// bulkWriter buffers docs without attachments and writes them to the target
// with `_bulk_docs` `{"new_edits":false}`.
type bulkWriter struct {
	r    *run
	docs []json.RawMessage
	size int
}

// add buffers doc, flushing first when the buffer would exceed the limit.
func (w *bulkWriter) add(ctx context.Context, doc json.RawMessage) error {
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

// write posts docs; 413 splits the list in halves, a single doc still too large is skipped and counted.
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
		drainClose(resp)
		if len(docs) == 1 {
			w.r.log.Warn("document too large for the target, skipped", "doc_id", docID(docs[0]))
			w.r.stats.docWriteFailures.Add(1)
			return nil
		}
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
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&results); err != nil {
		return newError("bulk_docs_failed", "invalid _bulk_docs response from "+tgt.RedactedURL()+": "+err.Error(), false)
	}
	failed := 0
	for _, res := range results {
		if res.Error != "" {
			failed++
			w.r.log.Warn("target rejected document", "doc_id", res.ID, "error", res.Error, "reason", res.Reason)
		}
	}
	w.r.stats.docWriteFailures.Add(int64(failed))
	w.r.stats.docsWritten.Add(int64(len(docs) - failed))
	return nil
}

// docID extracts _id from a doc body (for logs).
func docID(doc json.RawMessage) string {
	var v struct {
		ID string `json:"_id"`
	}
	json.Unmarshal(doc, &v)
	return v.ID
}
