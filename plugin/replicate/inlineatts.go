package replicate

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// Docs whose attachments are small travel in batches: fetched with
// `_bulk_get?attachments=true` (data inline, base64) and written with
// `_bulk_docs`, as PouchDB's replicator does, instead of one GET and one
// multipart PUT each (CouchDB's way). A 64 KiB attachment cost more in
// those two requests and the target's commit of one doc than in its
// bytes. Larger attachments keep the multipart path, which streams them.
const (
	// inlineAttMax bounds the attachment bytes of one doc sent inline.
	inlineAttMax = 256 << 10
	// inlineFetchBytes bounds the attachment bytes of one inline
	// _bulk_get answer (its base64 is a third larger), so that what a
	// run holds stays bounded whatever the batch size.
	inlineFetchBytes = bulkFlushBytes
)

// inlineAttBytes reports whether doc, as a `_bulk_get` answer with
// att_encoding_info=true lists it, may be fetched again with its
// attachments inline: every attachment a stub stored as it came (no
// "encoding": the inline data of a gzip-stored one is inflated, and its
// digest, of the gzipped bytes, would not match it on the target), their
// lengths together at most inlineAttMax. It returns their total length.
func inlineAttBytes(doc json.RawMessage) (int64, bool) {
	var v struct {
		Atts map[string]struct {
			Stub     bool   `json:"stub"`
			Length   *int64 `json:"length"`
			Encoding string `json:"encoding"`
		} `json:"_attachments"`
	}
	if json.Unmarshal(doc, &v) != nil || len(v.Atts) == 0 {
		return 0, false
	}
	var total int64
	for _, a := range v.Atts {
		if !a.Stub || a.Length == nil || *a.Length < 0 || a.Encoding != "" {
			return 0, false
		}
		total += *a.Length
		if total > inlineAttMax {
			return 0, false
		}
	}
	return total, true
}

// hasInlineData reports whether every attachment of doc carries its data
// inline (none a stub, none to follow) and is stored as it came (no
// "encoding" but identity): what _bulk_docs can write without the target
// having anything already. It scans (encoding/json
// took half the replicator's CPU time on 64 KiB attachments, checking
// their base64); keys match as encoding/json matches them, a repeated
// "stub" or "follows" that is true anywhere counts.
func hasInlineData(doc json.RawMessage) bool {
	ok := true
	_, err := members(doc, 0, func(key []byte, v int) (int, error) {
		if !keyIs(key, "_attachments") {
			return skipValue(doc, v)
		}
		if v >= len(doc) || doc[v] != '{' {
			ok = false
			return skipValue(doc, v)
		}
		return members(doc, v, func(_ []byte, a int) (int, error) {
			data := false
			end, err := members(doc, a, func(k []byte, x int) (int, error) {
				switch {
				case keyIs(k, "data"):
					data = x < len(doc) && doc[x] == '"'
				case keyIs(k, "stub") || keyIs(k, "follows"):
					if x < len(doc) && doc[x] == 't' {
						ok = false
					}
				case keyIs(k, "encoding"):
					// Stored gzipped after all (the source changed
					// since it listed the stubs): the data is
					// inflated, the digest is not of it.
					if end, err := skipValue(doc, x); err != nil || string(doc[x:end]) != `"identity"` {
						ok = false
					}
				}
				return skipValue(doc, x)
			})
			if !data {
				ok = false
			}
			return end, err
		})
	})
	return err == nil && ok
}

// inlineRev is a revision to fetch with its attachments inline, and their
// length.
type inlineRev struct {
	m    missingRev
	size int64
}

// fetchInline fetches revs with their attachments inline, a few MiB per
// `_bulk_get`, and writes them through w, flushing w after each answer so
// that no more than one answer is held at a time. It returns the
// revisions it could not write this way (an answer that failed, a doc
// that came back otherwise than asked), for fetching one by one.
func (r *run) fetchInline(ctx context.Context, revs []inlineRev, w *bulkWriter) ([]missingRev, error) {
	var rest []missingRev
	for len(revs) > 0 {
		n, size := 0, int64(0)
		for n < len(revs) && (n == 0 || size+revs[n].size <= inlineFetchBytes) {
			size += revs[n].size
			n++
		}
		group := make([]missingRev, n)
		for i, ir := range revs[:n] {
			// No atts_since: every attachment inline, so the target
			// needs none it may lack.
			group[i] = missingRev{id: ir.m.id, rev: ir.m.rev}
		}
		revs = revs[n:]
		failed, err := r.fetchInlineGroup(ctx, group, w)
		if err != nil {
			return nil, err
		}
		rest = append(rest, failed...)
	}
	return rest, nil
}

func (r *run) fetchInlineGroup(ctx context.Context, revs []missingRev, w *bulkWriter) ([]missingRev, error) {
	resp, err := r.src.Do(ctx, &couchclient.Request{Buffer: true, Reuse: true,
		Method: http.MethodPost, Path: "_bulk_get", Query: "latest=true&revs=true&attachments=true&att_encoding_info=true",
		Body:   bulkGetBodyAtts(revs, true),
		Header: http.Header{"Content-Type": {"application/json"}},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if mb := maxBackoff(err); mb != nil {
			return nil, mb
		}
		return revs, nil
	}
	defer couchclient.Release(resp)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		drainClose(resp)
		return revs, nil
	}
	data, err := couchclient.Bytes(resp)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return revs, nil
	}
	results, err := parseBulkGet(data)
	if err != nil {
		return revs, nil
	}
	var rest []missingRev
	got := 0
	for i, m := range revs {
		if !(i < len(results) && results[i].ID == m.id && len(results[i].Docs) == 1 &&
			results[i].Docs[0].OK != nil && hasInlineData(results[i].Docs[0].OK)) {
			rest = append(rest, m)
			continue
		}
		got++
		r.stats.docsRead.Add(1)
		if err := w.add(ctx, results[i].Docs[0].OK); err != nil {
			return nil, err
		}
	}
	r.stats.bulkGetDocs.Add(int64(got))
	// The docs share the answer's buffer: written before it is released.
	return rest, w.flush(ctx)
}
