package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// Adaptive skip constants, 3.x values.
const (
	revsDiffAlpha     = 0.4
	revsDiffThreshold = 0.95
	bulkGetAlpha      = 0.25
	bulkGetThreshold  = 0.5
	adaptiveRecheck   = 37 * time.Second
)

// batch is up to worker_batch_size changes, numbered in feed order.
type batch struct {
	ord     uint64
	changes []change
	lastSeq json.RawMessage
}

// missingRev is a revision the target lacks, with the ancestors it has.
type missingRev struct {
	id, rev string
	pas     []string
}

// adaptive is an exponential moving average deciding whether an optional request is worth making.
type adaptive struct {
	mu    sync.Mutex
	ratio float64
	last  time.Time
}

func (a *adaptive) value() (float64, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ratio, a.last
}

// adaptiveState is an adaptive's value, carried from a run to the next
// (Resume).
type adaptiveState struct {
	ratio float64
	last  time.Time
}

func (a *adaptive) state() adaptiveState {
	ratio, last := a.value()
	return adaptiveState{ratio, last}
}

func (a *adaptive) set(st adaptiveState) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ratio, a.last = st.ratio, st.last
}

func (a *adaptive) update(alpha, sample float64, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ratio = alpha*sample + (1-alpha)*a.ratio
	a.last = now
}

// process replicates one batch: revs_diff, fetch, write.
func (r *run) process(ctx context.Context, b *batch) error {
	order := make([]string, 0, len(b.changes))
	revs := make(map[string][]string, len(b.changes))
	n := 0
	for _, c := range b.changes {
		if _, ok := revs[c.ID]; !ok {
			order = append(order, c.ID)
		}
		for _, cr := range c.Changes {
			if cr.Rev != "" && !contains(revs[c.ID], cr.Rev) {
				revs[c.ID] = append(revs[c.ID], cr.Rev)
				n++
			}
		}
	}
	missing, err := r.findMissing(ctx, order, revs, n)
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	w := &bulkWriter{r: r}
	// The docs of _bulk_get answers stay in their buffers until written.
	var held []*http.Response
	defer func() {
		for _, resp := range held {
			couchclient.Release(resp)
		}
	}()
	var individual, bulk []missingRev
	for _, m := range missing {
		if strings.HasPrefix(m.id, "_design/") {
			individual = append(individual, m)
		} else {
			bulk = append(bulk, m)
		}
	}
	if len(bulk) > 0 {
		if r.useBulkGet() {
			rest, err := r.bulkGet(ctx, bulk, w, &held)
			if err != nil {
				return err
			}
			individual = append(individual, rest...)
		} else {
			individual = append(individual, bulk...)
		}
	}
	if err := r.fetchEach(ctx, individual, w); err != nil {
		return err
	}
	return w.flush(ctx)
}

// parallelFetches bounds the docs one worker fetches and writes one by
// one at the same time. One at a time, a batch of docs with large
// attachments (each a GET and a multipart PUT) kept about one core busy
// whatever worker_processes said, since one worker's batch held most of
// the changes (400 docs of 1 MiB ran at 111 MB/s; four at a time,
// 150–200 MB/s). The connection pool still bounds the requests to each
// host (http_connections).
const parallelFetches = 4

// fetchEach fetches and writes the docs of ms one by one, up to
// parallelFetches at once; the first error stops the others and is
// returned.
func (r *run) fetchEach(ctx context.Context, ms []missingRev, w *bulkWriter) error {
	if len(ms) <= 1 {
		for _, m := range ms {
			if err := r.fetchAndWrite(ctx, m, w); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(parallelFetches, len(ms)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(ms) {
					return
				}
				if err := r.fetchAndWrite(ctx, ms[i], w); err != nil {
					once.Do(func() { first = err; cancel(err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return context.Cause(ctx) // the caller's context ended
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// findMissing asks the target which revs it lacks (or, when nearly every rev
// recently was missing, assumes all are: writes use new_edits=false, so that is safe).
func (r *run) findMissing(ctx context.Context, order []string, revs map[string][]string, n int) ([]missingRev, error) {
	r.stats.missingChecked.Add(int64(n))
	ratio, last := r.revsDiffEMA.value()
	if ratio > revsDiffThreshold && time.Since(last) < adaptiveRecheck {
		out := make([]missingRev, 0, n)
		for _, id := range order {
			for _, rev := range revs[id] {
				out = append(out, missingRev{id: id, rev: rev})
			}
		}
		r.stats.missingFound.Add(int64(n))
		return out, nil
	}
	body, _ := json.Marshal(revs)
	resp, err := r.tgt.Do(ctx, &couchclient.Request{Buffer: true, Turn: true,
		Method: http.MethodPost, Path: "_revs_diff", Body: body,
		Header: http.Header{"Content-Type": {"application/json"}},
	})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError("revs_diff_failed", resp, "POST", r.tgt.RedactedURL()+"_revs_diff")
	}
	var diff map[string]struct {
		Missing           []string `json:"missing"`
		PossibleAncestors []string `json:"possible_ancestors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&diff); err != nil {
		return nil, newError("revs_diff_failed", "invalid _revs_diff response from "+r.tgt.RedactedURL()+": "+err.Error(), false)
	}
	var out []missingRev
	fresh := 0
	for _, id := range order {
		d, ok := diff[id]
		if !ok {
			continue
		}
		for _, rev := range d.Missing {
			out = append(out, missingRev{id: id, rev: rev, pas: d.PossibleAncestors})
			if len(d.PossibleAncestors) == 0 {
				fresh++
			}
		}
	}
	r.stats.missingFound.Add(int64(len(out)))
	if n > 0 {
		r.revsDiffEMA.update(revsDiffAlpha, float64(fresh)/float64(n), time.Now())
	}
	return out, nil
}

func (r *run) useBulkGet() bool {
	if !r.rep.UseBulkGet {
		return false
	}
	ratio, last := r.bulkGetEMA.value()
	return ratio <= bulkGetThreshold || time.Since(last) >= adaptiveRecheck
}

// bulkGet fetches revs with `_bulk_get`; docs with small attachments are
// fetched again with them inline (fetchInline), docs it cannot use (larger
// attachments, errors, any non-200) are returned for individual fetching. The docs given
// to w share the answer's buffer, which is appended to held: the caller
// releases it once w has written them.
func (r *run) bulkGet(ctx context.Context, revs []missingRev, w *bulkWriter, held *[]*http.Response) ([]missingRev, error) {
	r.stats.bulkGetAttempts.Add(int64(len(revs)))
	// Revisions another run of the same source just fetched, or is
	// fetching (shared.go): the runs of a fan-out woken by one write all
	// miss the new revision at once.
	need := revs[:0:0]
	var others []missingRev
	var waits []<-chan struct{}
	var claimed []string
	release := func() {
		for _, k := range claimed {
			r.group.revs.release(k)
		}
		claimed = nil
	}
	defer release()
	useShared := func(m missingRev) (bool, error) {
		doc, ok := r.group.revs.get(revKey(r.srcKey, m.id, m.rev))
		if !ok {
			return false, nil
		}
		r.stats.docsRead.Add(1)
		r.stats.bulkGetDocs.Add(1)
		r.group.totals.sharedDocs.Add(1)
		return true, w.add(ctx, doc)
	}
	for _, m := range revs {
		if ok, err := useShared(m); ok || err != nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		key := revKey(r.srcKey, m.id, m.rev)
		if wait, mine := r.group.revs.claim(key); !mine {
			others, waits = append(others, m), append(waits, wait)
			continue
		}
		claimed = append(claimed, key)
		need = append(need, m)
	}
	var rest []missingRev
	if len(need) > 0 {
		var err error
		if rest, err = r.fetchBulk(ctx, need, w, held); err != nil {
			return nil, err
		}
	}
	release()
	for i, m := range others {
		select {
		case <-waits[i]:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		ok, err := useShared(m)
		if err != nil {
			return nil, err
		}
		if !ok { // the other run could not use it: fetched on its own
			rest = append(rest, m)
		}
	}
	return rest, nil
}

// fetchBulk fetches revs with one `_bulk_get` (see bulkGet).
func (r *run) fetchBulk(ctx context.Context, revs []missingRev, w *bulkWriter, held *[]*http.Response) ([]missingRev, error) {
	body := bulkGetBody(revs)
	resp, err := r.src.Do(ctx, &couchclient.Request{Buffer: true, Reuse: true,
		Method: http.MethodPost, Path: "_bulk_get", Query: "latest=true&revs=true&attachments=false&att_encoding_info=true", Body: body,
		Header: http.Header{"Content-Type": {"application/json"}},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if mb := maxBackoff(err); mb != nil {
			return nil, mb
		}
		r.bulkGetEMA.update(bulkGetAlpha, 1, time.Now())
		return revs, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		drainClose(resp)
		r.bulkGetEMA.update(bulkGetAlpha, 1, time.Now())
		return revs, nil
	}
	*held = append(*held, resp)
	data, err := couchclient.Bytes(resp)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.bulkGetEMA.update(bulkGetAlpha, 1, time.Now())
		return revs, nil
	}
	results, err := parseBulkGet(data)
	if err != nil {
		r.bulkGetEMA.update(bulkGetAlpha, 1, time.Now())
		return revs, nil
	}
	var rest []missingRev
	var inline []inlineRev
	got := 0
	for i, m := range revs {
		ok := i < len(results) && results[i].ID == m.id && len(results[i].Docs) == 1 &&
			results[i].Docs[0].OK != nil
		if ok && results[i].Docs[0].HasAtts {
			if size, small := inlineAttBytes(results[i].Docs[0].OK); small {
				inline = append(inline, inlineRev{m: m, size: size})
				continue
			}
			ok = false
		}
		if !ok {
			rest = append(rest, m)
			continue
		}
		got++
		r.stats.docsRead.Add(1)
		r.group.revs.put(revKey(r.srcKey, m.id, m.rev), results[i].Docs[0].OK)
		if err := w.add(ctx, results[i].Docs[0].OK); err != nil {
			return nil, err
		}
	}
	r.stats.bulkGetDocs.Add(int64(got))
	r.bulkGetEMA.update(bulkGetAlpha, float64(len(rest))/float64(len(revs)), time.Now())
	if len(inline) > 0 {
		failed, err := r.fetchInline(ctx, inline, w)
		if err != nil {
			return nil, err
		}
		rest = append(rest, failed...)
	}
	return rest, nil
}

// hasAttachments reports whether a doc body has a non-empty _attachments object.
func hasAttachments(doc json.RawMessage) bool {
	if !bytes.Contains(doc, []byte(`"_attachments"`)) {
		return false
	}
	var v struct {
		Atts map[string]json.RawMessage `json:"_attachments"`
	}
	if json.Unmarshal(doc, &v) != nil {
		return false // _attachments is not an object: the target judges the doc
	}
	return len(v.Atts) > 0
}
