package replicate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// Individual fetch limits, 3.x values.
const (
	// maxURLLen bounds an individual GET's URL (atts_since is cut to fit);
	// each 414 answer halves it, down to minURLLen.
	maxURLLen = 7000
	minURLLen = 200
	// missingDocRetry is missing_doc_retry_msec's default.
	missingDocRetry = 2000 * time.Millisecond
)

// fetchOutcome is what fetching and writing one revision came to.
type fetchOutcome int

const (
	fetchDone        fetchOutcome = iota // written, or rejected and counted
	fetchMissing                         // the source no longer has the rev
	fetchMissingStub                     // the target lacks an attachment stub's body
	fetchURITooLong                      // the source answered 414 Request-URI Too Long
)

// docPath escapes a doc id for a URL path, keeping the "_design/" prefix readable.
func docPath(id string) string {
	if rest, ok := strings.CutPrefix(id, "_design/"); ok {
		return "_design/" + url.PathEscape(rest)
	}
	return url.PathEscape(id)
}

// fetchAndWrite copies one revision with an individual GET (attachments
// streamed) and writes it; a missing rev or stub is refetched once, after
// missing_doc_retry_msec, without atts_since. A 414 answer halves the URL
// length limit (atts_since is cut shorter) and asks again; below 200
// characters the fetch fails with request_uri_too_long.
func (r *run) fetchAndWrite(ctx context.Context, m missingRev, w *bulkWriter) error {
	pas := m.pas
	readRetries, wait := r.rep.RetriesPerRequest, 250*time.Millisecond
	urlLimit := maxURLLen
	for attempt := 0; ; attempt++ {
		out, err := r.fetchOne(ctx, m.id, m.rev, pas, urlLimit, w)
		var rf *readFailure
		if errors.As(err, &rf) && readRetries > 0 && ctx.Err() == nil {
			readRetries--
			r.log.Debug("fetch interrupted, retrying", "doc_id", m.id, "rev", m.rev, "error", rf.err.Error())
			if err := couchclient.Sleep(ctx, wait); err != nil {
				return err
			}
			wait *= 2
			attempt--
			continue
		}
		if rf != nil {
			err = rf.asError()
		}
		if err != nil {
			return err
		}
		if out == fetchURITooLong {
			urlLimit /= 2
			if urlLimit < minURLLen {
				return newError("open_doc_revs_failed", fmt.Sprintf("request_uri_too_long: failed to fetch %s revision %s from %s: 414 even for URLs under %d characters", m.id, m.rev, r.src.RedactedURL(), urlLimit*2), false)
			}
			r.log.Debug("414 on individual fetch, shortening the URL", "doc_id", m.id, "rev", m.rev, "max_url_len", urlLimit)
			attempt--
			continue
		}
		if out == fetchDone {
			return nil
		}
		if attempt > 0 {
			if out == fetchMissingStub {
				return r.docWriteFailed(FailedDoc{ID: m.id, Rev: m.rev, Status: http.StatusPreconditionFailed, Error: "missing_stub",
					Reason: "the target lacks an attachment the revision refers to, also after fetching it again"})
			}
			r.log.Warn("revision still missing after retry, skipped", "doc_id", m.id, "rev", m.rev)
			return nil
		}
		r.log.Debug("retrying fetch of unexpectedly missing revision", "doc_id", m.id, "rev", m.rev)
		if err := couchclient.Sleep(ctx, r.missingDocRetry); err != nil {
			return err
		}
		pas = nil
	}
}

// openRevsQuery builds the individual GET query, truncating atts_since to
// keep the URL (base + "?" + query) under maxLen characters.
func openRevsQuery(base string, rev string, pas []string, maxLen int) string {
	revJSON, _ := json.Marshal([]string{rev})
	q := "revs=true&open_revs=" + url.QueryEscape(string(revJSON)) + "&latest=true&attachments=true"
	for n := len(pas); n > 0; n-- {
		pj, _ := json.Marshal(pas[:n])
		cand := q + "&atts_since=" + url.QueryEscape(string(pj))
		if len(base)+1+len(cand) < maxLen {
			return cand
		}
	}
	return q
}

// fetchOne GETs one revision with open_revs (URL under urlLimit characters) and writes it.
func (r *run) fetchOne(ctx context.Context, id, rev string, pas []string, urlLimit int, w *bulkWriter) (fetchOutcome, error) {
	path := docPath(id)
	resp, err := r.src.Do(ctx, &couchclient.Request{
		Method: http.MethodGet, Path: path, Query: openRevsQuery(r.src.URL()+path, rev, pas, urlLimit),
		Header: http.Header{"Accept": {"multipart/mixed"}},
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if mb := maxBackoff(err); mb != nil {
			return 0, mb
		}
		return 0, newError("open_doc_revs_failed", fmt.Sprintf("failed to fetch %s revision %s from %s: %v", id, rev, r.src.RedactedURL(), asError(err).Reason), false)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		drainClose(resp)
		return fetchMissing, nil
	}
	if resp.StatusCode == http.StatusRequestURITooLong {
		drainClose(resp)
		return fetchURITooLong, nil
	}
	if resp.StatusCode != http.StatusOK {
		return 0, statusError("open_doc_revs_failed", resp, "GET", r.src.RedactedURL()+path)
	}
	mt, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "multipart/mixed" {
		return r.readMultipart(ctx, id, rev, resp.Body, params["boundary"], w)
	}
	var rows []struct {
		OK      json.RawMessage `json:"ok"`
		Missing string          `json:"missing"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		return 0, r.readFailure(ctx, id, rev, err)
	}
	out := fetchDone
	for _, row := range rows {
		if row.OK == nil {
			out = fetchMissing
			continue
		}
		r.stats.docsRead.Add(1)
		o, err := r.writeJSONDoc(ctx, id, rev, row.OK, w)
		if err != nil {
			return 0, err
		}
		if o != fetchDone {
			out = o
		}
	}
	return out, nil
}

// readFailure is a fetch cut short while reading the source's answer; it is retried.
type readFailure struct {
	id, rev, url string
	err          error
}

func (f *readFailure) Error() string { return f.asError().Error() }

func (f *readFailure) asError() *Error {
	return newError("open_doc_revs_failed", fmt.Sprintf("failed to read %s revision %s from %s: %v", f.id, f.rev, f.url, f.err), false)
}

func (r *run) readFailure(ctx context.Context, id, rev string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &readFailure{id: id, rev: rev, url: r.src.RedactedURL(), err: err}
}

// readMultipart handles an open_revs multipart/mixed response: JSON parts are
// docs without attachment bodies, multipart/related parts are streamed to the target as they are read.
func (r *run) readMultipart(ctx context.Context, id, rev string, body io.Reader, boundary string, w *bulkWriter) (fetchOutcome, error) {
	// A multipart.Reader reads through a 4 KiB buffer unless given a
	// larger one: attachment data then crossed in 4 KiB reads, each
	// sent on as one chunk of the PUT (a write syscall per 4 KiB).
	mr := multipart.NewReader(bufio.NewReaderSize(body, streamBufSize), boundary)
	out := fetchDone
	for {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return 0, r.readFailure(ctx, id, "", err)
		}
		ct := part.Header.Get("Content-Type")
		pmt, _, _ := mime.ParseMediaType(ct)
		var o fetchOutcome
		if pmt == "multipart/related" {
			r.stats.docsRead.Add(1)
			o, err = r.putDoc(ctx, id, rev, ct, fullReader{r: part}, -1)
		} else {
			var doc []byte
			doc, err = io.ReadAll(part)
			if err != nil {
				return 0, r.readFailure(ctx, id, "", err)
			}
			var probe struct {
				ID      string `json:"_id"`
				Missing string `json:"missing"`
			}
			if err := json.Unmarshal(doc, &probe); err != nil {
				// Not "missing": skipping it would checkpoint past the doc.
				return 0, r.readFailure(ctx, id, rev, err)
			}
			if probe.ID == "" {
				o = fetchMissing
			} else {
				r.stats.docsRead.Add(1)
				o, err = r.writeJSONDoc(ctx, id, rev, doc, w)
			}
		}
		part.Close()
		if err != nil {
			return 0, err
		}
		if o != fetchDone {
			out = o
		}
	}
}

// streamBufSize is the buffer an attachment streamed from the source to
// the target crosses the replicator in.
const streamBufSize = 128 << 10

// fullReader fills each read buffer as far as its reader allows: a
// multipart part returns what one read of the source brought, and each
// read becomes one chunk of the chunked PUT to the target (a write per
// chunk). It stops filling after fullReadWait, so that a source sending
// slowly still shows progress to the PUT's inactivity timer, which each
// read resets.
type fullReader struct{ r io.Reader }

const fullReadWait = time.Second

func (f fullReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	start := time.Now()
	for err == nil && n < len(p) && time.Since(start) < fullReadWait {
		var k int
		k, err = f.r.Read(p[n:])
		n += k
	}
	if n > 0 && err == io.EOF {
		err = nil // the next read says EOF
	}
	return n, err
}

// WriteTo sends the part in pieces of up to streamBufSize, each as full
// as Read makes it: the transport otherwise copies a body through its
// own 32 KiB buffer, one chunk of the PUT (two write syscalls) per 32 KiB.
func (f fullReader) WriteTo(w io.Writer) (int64, error) {
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	// Both wrapped, so that neither's WriteTo or ReadFrom takes over
	// with buffers of its own.
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{f}, *bp)
}

// streamBufs recycles fullReader's WriteTo buffers.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, streamBufSize); return &b }}

// writeJSONDoc writes a doc fetched as JSON: design docs and docs with
// attachment stubs are PUT on their own, the rest join the _bulk_docs buffer.
func (r *run) writeJSONDoc(ctx context.Context, id, rev string, doc json.RawMessage, w *bulkWriter) (fetchOutcome, error) {
	if strings.HasPrefix(id, "_design/") || hasAttachments(doc) {
		return r.putDoc(ctx, id, rev, "application/json", bytes.NewReader(doc), int64(len(doc)))
	}
	return fetchDone, w.add(ctx, doc)
}

// putDoc writes one doc to the target with `PUT {docid}?new_edits=false`,
// streaming body (read once: a failed attempt is not replayed here, the
// caller refetches). rev is the revision asked of the source, for the
// record of a refusal.
func (r *run) putDoc(ctx context.Context, id, rev, contentType string, body io.Reader, length int64) (fetchOutcome, error) {
	used := false
	path := docPath(id)
	resp, err := r.tgt.Do(ctx, &couchclient.Request{
		Method: http.MethodPut, Path: path, Query: "new_edits=false",
		Header:        http.Header{"Content-Type": {contentType}},
		ContentLength: length,
		NoRetry:       true,
		GetBody: func(context.Context) (io.ReadCloser, error) {
			if used {
				return nil, errors.New("streamed body cannot be replayed")
			}
			used = true
			return io.NopCloser(body), nil
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if mb := maxBackoff(err); mb != nil {
			return 0, mb
		}
		return 0, newError("doc_write_failed", fmt.Sprintf("PUT %s%s: %s", r.tgt.RedactedURL(), path, asError(err).Reason), false)
	}
	defer resp.Body.Close()
	var res struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(raw, &res) // a body that is not CouchDB's error object leaves error and reason empty
	switch {
	case resp.StatusCode/100 == 2:
		r.stats.docsWritten.Add(1)
		return fetchDone, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
		resp.StatusCode == http.StatusRequestEntityTooLarge || resp.StatusCode == http.StatusUnsupportedMediaType ||
		resp.StatusCode == http.StatusBadRequest:
		// A refusal of this doc: counted, as the same doc refused in a
		// _bulk_docs answer is. CouchDB counts a 400 only for an invalid
		// attachment name and crashes on the others (a revision the
		// target cannot import, say), which would crash the job again
		// at every retry.
		return fetchDone, r.docWriteFailed(FailedDoc{ID: id, Rev: rev, Status: resp.StatusCode, Error: res.Error, Reason: res.Reason})
	case resp.StatusCode == http.StatusPreconditionFailed && res.Error == "missing_stub":
		return fetchMissingStub, nil
	default:
		reason := fmt.Sprintf("%d PUT %s%s", resp.StatusCode, r.tgt.RedactedURL(), path)
		if res.Error != "" {
			reason += ": " + res.Error + ": " + res.Reason
		}
		return 0, newError("doc_write_failed", reason, false)
	}
}

// drainClose discards a short remainder of a response body and closes it.
func drainClose(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}
