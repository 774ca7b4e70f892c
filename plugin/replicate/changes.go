package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/hashicorp/go-hclog"
)

// change is one row of the source's changes feed. A row with only lastSeq
// set is a marker: the feed moved past filtered-out changes.
type change struct {
	Seq     json.RawMessage `json:"seq"`
	ID      string          `json:"id"`
	Changes []struct {
		Rev string `json:"rev"`
	} `json:"changes"`
	Deleted bool            `json:"deleted"`
	LastSeq json.RawMessage `json:"last_seq"`
}

// viewArgs are the _view filter query params CouchDB JSON-encodes.
var viewArgs = map[string]bool{
	"key": true, "startkey": true, "start_key": true, "endkey": true, "end_key": true, "keys": true,
}

// changesReader streams the source's changes feed into out.
type changesReader struct {
	src  *couchclient.Client
	rep  *parse.Rep
	log  hclog.Logger
	out  chan<- change
	wait time.Duration // first retry wait
	// clientFilter: the source refused POST _changes, so doc_ids are filtered here.
	clientFilter bool
	docIDs       map[string]bool
	// maxIDLen is max_document_id_length (0 = none): changes of longer ids
	// (in bytes) are not replicated; onIDTooLong counts each one, and its
	// error (doc_write_failure "fail") ends the read.
	maxIDLen    int
	onIDTooLong func(c change) error

	// Sharing a slot (see Options.Slot; nil slot: not shared). through
	// waits until every change up to a seq is replicated; sent is the seq
	// of the last change handed on; rows counts the changes handed on;
	// quiet is set while the slot is handed on.
	slot    Slot
	through func(ctx context.Context, seq json.RawMessage) error
	sent    atomic.Pointer[json.RawMessage]
	rows    int
	quiet   *atomic.Bool
	// asked is set when the slot was asked for and not yet handed on;
	// askedAt is when it last was; record collects a round's rows for
	// sharing (see shared.go).
	asked   bool
	askedAt time.Time
	record  *[]change
	// rounds is set while the reader reads in rounds (see run.batcher).
	rounds atomic.Bool
	// followKey is the sharedKey under which the reader counts among its
	// source's followers ("" when it does not: see followers.go).
	followKey string
	// srcKey is the run's endpointKey of the source (see sharedKey);
	// group, the run's Group, whose windows the reader shares.
	srcKey string
	group  *Group
	// unheard is since when the reader has waited on its source without
	// hearing from it (Unix ns; 0: not waiting on it; see liveness.go);
	// retryFor, how long it retries a feed that fails without a word from
	// the source (the pool's RetryWindow; 0: retries_per_request only).
	unheard  *atomic.Int64
	retryFor time.Duration
}

// roundLinger is how long after its slot was last asked for a run keeps
// reading in rounds (on its source's signal, without a feed) rather than
// reopening its continuous feed: under load it is asked again and again.
const roundLinger = 5 * time.Second

// run reads from since until the feed ends (one-shot) or ctx is done
// (continuous). The caller closes out once it has recorded run's error:
// closing it first would let the batch pipeline drain and the run end
// before the error that stopped the feed is known.
func (r *changesReader) run(ctx context.Context, since json.RawMessage) error {
	if r.rep.DocIDs != nil && len(r.rep.DocIDs) == 0 {
		// An empty doc_ids list selects no document: as in CouchDB, there
		// are no changes to read (a continuous job stays idle).
		if r.rep.Continuous {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	defer r.unlisten()
	if key := r.sharedKey(); r.slot != nil && key != "" && r.rep.Continuous {
		r.followKey = key
		defer r.group.follow.follow(key)()
	}
	retries := r.rep.RetriesPerRequest
	wait := r.wait
	attempts := 0 // requests failed since the source last said something
	r.sent.Store(&since)
	unwatched := false // the source cannot be watched: no rounds
	for {
		// While another job waits for a slot, read in rounds (see pass).
		round := false
		var changed <-chan struct{}
		if r.slot != nil && !unwatched && r.wanted() {
			var ok bool
			if changed, ok = r.slot.Next(); ok { // armed before the read
				round = true
			} else {
				unwatched = true
			}
		}
		r.rounds.Store(round)
		var progressed, asked, company bool
		var last json.RawMessage
		var err error
		rows := r.rows
		if round {
			progressed, last, err = r.readRound(ctx, since, changed)
		} else {
			rctx, stop := r.interruptible(ctx, unwatched)
			progressed, last, err = r.request(rctx, since, 0)
			asked, company = stop()
		}
		if last != nil {
			since = last
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if asked {
			r.asked, r.askedAt = true, time.Now()
			continue
		}
		if company {
			continue // others follow the source now: read in rounds
		}
		if round && err == nil {
			if err := r.pass(ctx, changed, r.rows-rows >= r.roundRows()); err != nil {
				return err
			}
			retries, wait = r.rep.RetriesPerRequest, r.wait
			continue
		}
		if err == nil && !r.rep.Continuous {
			return nil
		}
		if err == nil || progressed {
			// The feed ended as asked (`timeout`), or failed after rows:
			// the source is alive, the next failure has every retry.
			retries, wait, attempts = r.rep.RetriesPerRequest, r.wait, 0
		}
		if err != nil {
			var fe *Error
			if errors.As(err, &fe) {
				return fe
			}
			if !progressed {
				// A feed that says nothing within connection_timeout is
				// dead, not idle: the source was asked to end it within a
				// third of that. It is retried as any failure, and the run
				// fails after the retries (CouchDB's changes_reader_died).
				// As a request the client retries, a silent feed is retried
				// for RetryWindow at most (60 s by default).
				attempts++
				silent := errors.Is(err, couchclient.ErrInactivity)
				if retries <= 0 || silent && r.retryFor > 0 && r.unheardFor() >= r.retryFor {
					if silent {
						return r.deadFeed(r.unheardFor(), attempts)
					}
					return asError(err)
				}
				retries--
				if silent {
					r.log.Warn("changes feed said nothing within connection_timeout: reopening it",
						"silent_for", r.unheardFor().Round(time.Second).String(), "retries_left", retries)
				} else {
					r.log.Debug("changes feed failed, retrying", "error", err.Error(), "wait", wait.String())
				}
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
				wait = min(wait*2, 5*time.Minute)
			}
		}
	}
}

// roundRows is the most changes a round reads: a slot is handed on at
// least this often while others wait.
func (r *changesReader) roundRows() int {
	return max(1, r.rep.WorkerBatchSize) * max(1, r.rep.WorkerProcesses)
}

// received reports whether a value was received from ch without waiting.
func received(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// isClosed reports whether ch, a channel only ever closed, is closed.
func isClosed(ch <-chan struct{}) bool { return received(ch) }

// wanted reports whether the reader reads in rounds: its slot is asked
// for, or was a moment ago (roundLinger), or other runs follow its source
// (followers.go).
func (r *changesReader) wanted() bool {
	if received(r.slot.Yield()) {
		r.asked, r.askedAt = true, time.Now()
	}
	return r.asked || time.Since(r.askedAt) < roundLinger || r.fanOut()
}

// fanOut reports whether other gated runs of the Group follow the
// reader's source.
func (r *changesReader) fanOut() bool {
	return r.followKey != "" && r.group.follow.shared(r.followKey)
}

// interruptible returns the context of a continuous feed request of a
// run sharing a slot: it is cancelled as soon as the slot is asked for,
// so that the run reads a round and hands its slot on, or another run
// follows the same source (followers.go), so that both read in rounds.
// stop ends the watch and reports which cancelled it.
func (r *changesReader) interruptible(ctx context.Context, off bool) (context.Context, func() (asked, company bool)) {
	if r.slot == nil || off {
		return ctx, func() (bool, bool) { return false, false }
	}
	var company <-chan struct{}
	if r.followKey != "" {
		company = r.group.follow.company(r.followKey)
	}
	rctx, cancel := context.WithCancel(ctx)
	var asked, joined atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-r.slot.Yield():
			asked.Store(true)
			cancel()
		case <-company:
			joined.Store(true)
			cancel()
		case <-rctx.Done():
		}
	}()
	return rctx, func() (bool, bool) {
		cancel()
		<-done
		return asked.Load(), joined.Load()
	}
}

// readRound reads the changes after since, at most roundRows of them:
// first from the window of recent changes that runs of the same source
// share (shared.go), then from the source, extending the window. A run
// that finds another run reading on from the window's end with the same
// signal armed waits for that read instead of making its own.
func (r *changesReader) readRound(ctx context.Context, since json.RawMessage, changed <-chan struct{}) (bool, json.RawMessage, error) {
	key := r.sharedKey()
	if key == "" {
		return r.request(ctx, since, r.roundRows())
	}
	limit := r.roundRows()
	var last json.RawMessage
	var finish func(rows []change, ok bool)
	served, shared, waited := 0, false, false
	for {
		rows, atEnd, ok := r.group.changes.get(key, since, changed, limit-served)
		if ok {
			shared = true
			for _, c := range rows {
				if err := r.emit(ctx, c); err != nil {
					r.countShared(shared)
					return last != nil, last, err
				}
				last, since = c.Seq, c.Seq
			}
			served += len(rows)
			if atEnd || served >= limit {
				r.countShared(shared)
				return last != nil, last, nil
			}
		}
		if waited {
			break
		}
		lead, f := r.group.changes.join(key, since, changed)
		if f != nil {
			finish = f
			defer f(nil, false) // unless called with the rows below
		}
		if lead == nil {
			break
		}
		waited = true
		select {
		case <-lead.done:
		case <-ctx.Done():
			r.countShared(shared)
			return last != nil, last, ctx.Err()
		}
		if rows, ok := lead.result(); ok {
			// The read waited for was sent after this run armed its
			// signal: its rows are this round's, even if the signal
			// fired meanwhile (the run then reads again).
			r.countShared(true)
			for _, c := range rows[:min(len(rows), limit-served)] {
				if err := r.emit(ctx, c); err != nil {
					return last != nil, last, err
				}
				last = c.Seq
			}
			return last != nil || served > 0, last, nil
		}
	}
	r.countShared(shared)
	var read []change
	r.record = &read
	progressed, l, err := r.request(ctx, since, limit-served)
	r.record = nil
	if l != nil {
		last = l
	}
	if err == nil && len(read) < limit-served {
		r.group.changes.put(key, since, read, changed)
	}
	if finish != nil {
		finish(read, err == nil)
	}
	return progressed || served > 0, last, err
}

// countShared counts a round served from the shared window.
func (r *changesReader) countShared(shared bool) {
	if shared {
		r.group.totals.sharedReads.Add(1)
	}
}

// pass ends a round once everything read is replicated. If the slot is
// asked for, it hands it on, waits for a change of the source (armed
// before the round's read, so none is missed; not at all when the round
// left changes unread) and then for a slot. If it was asked for a moment
// ago, it waits for a change holding its slot, without a feed. Otherwise
// the run goes back to its continuous feed.
func (r *changesReader) pass(ctx context.Context, changed <-chan struct{}, more bool) error {
	r.unlisten()
	if err := r.through(ctx, *r.sent.Load()); err != nil {
		return err
	}
	for {
		if received(r.slot.Yield()) {
			r.asked, r.askedAt = true, time.Now()
		}
		if r.asked {
			r.asked = false
			r.quiet.Store(true)
			defer r.quiet.Store(false)
			r.slot.Release()
			if !more {
				select {
				case <-changed:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return r.slot.Acquire(ctx)
		}
		linger := roundLinger - time.Since(r.askedAt)
		if more {
			return nil
		}
		if linger <= 0 {
			if !r.fanOut() {
				return nil
			}
			// Following the source with others: wait for its change,
			// looking again now and then whether it still has company.
			linger = roundLinger
		}
		t := time.NewTimer(linger)
		select {
		case <-changed:
			t.Stop()
			return nil
		case <-r.slot.Yield():
			t.Stop()
			r.asked, r.askedAt = true, time.Now()
		case <-t.C:
			if !r.fanOut() {
				return nil
			}
			// Nothing changed since the round's read (the signal was
			// armed before it): nothing to read yet.
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// query builds the _changes query string and body for since; a limit
// (a round) reads a normal feed of at most that many changes.
func (r *changesReader) query(since json.RawMessage, limit int) (string, []byte) {
	feed := "normal"
	if r.rep.Continuous && limit == 0 {
		feed = "continuous"
	}
	style := "all_docs"
	if r.rep.WinningRevsOnly {
		style = "main_only"
	}
	timeout := int(feedTimeout(r.rep.ConnectionTimeout) / time.Millisecond)
	q := "feed=" + feed + "&style=" + style + "&since=" + url.QueryEscape(seqString(since)) + "&timeout=" + strconv.Itoa(timeout)
	if limit > 0 {
		q += "&limit=" + strconv.Itoa(limit)
	}
	var body []byte
	switch {
	case r.clientFilter:
	case len(r.rep.DocIDs) > 0 && r.rep.Filter != "_view" && !strings.Contains(r.rep.Filter, "/"):
		q += "&filter=_doc_ids"
		body, _ = json.Marshal(map[string][]string{"doc_ids": r.rep.DocIDs})
	case len(r.rep.Selector) > 0:
		q += "&filter=_selector"
		body = append(append([]byte(`{"selector":`), r.rep.Selector...), '}')
	case r.rep.Filter != "":
		q += "&filter=" + url.QueryEscape(r.rep.Filter)
		q += queryParams(r.rep.QueryParams, r.rep.Filter == "_view")
	}
	return q, body
}

// queryParams renders query_params in their original order, values stringified.
func queryParams(raw json.RawMessage, view bool) string {
	if len(raw) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	var b strings.Builder
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			break
		}
		k, _ := kt.(string)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			break
		}
		val := string(v)
		if !(view && viewArgs[k]) {
			val = seqString(v)
		}
		b.WriteString("&" + url.QueryEscape(k) + "=" + url.QueryEscape(val))
	}
	return b.String()
}

// request runs one _changes request. It reports whether any row arrived and the
// last seq seen (a row's seq, or the feed's last_seq in continuous mode).
func (r *changesReader) request(ctx context.Context, since json.RawMessage, limit int) (progressed bool, last json.RawMessage, err error) {
	r.listening()
	defer func() {
		if err == nil {
			r.heard() // the end of the response, as asked
		}
	}()
	q, body := r.query(since, limit)
	req := &couchclient.Request{Method: http.MethodGet, Path: "_changes", Query: q, Feed: true}
	if body != nil {
		req.Method = http.MethodPost
		req.Body = body
		req.Header = http.Header{"Content-Type": {"application/json"}}
	}
	resp, err := r.src.Do(ctx, req)
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusMethodNotAllowed && len(r.rep.DocIDs) > 0 && !r.clientFilter {
		// No POST _changes: read the whole feed and keep the doc_ids here.
		drainClose(resp)
		r.clientFilter = true
		return r.request(ctx, since, limit)
	}
	if resp.StatusCode != http.StatusOK {
		e := statusError("changes_req_failed", resp, req.Method, r.src.RedactedURL()+"_changes")
		e.Fatal = resp.StatusCode/100 == 4
		return false, nil, e
	}
	if r.rep.Continuous && limit == 0 {
		return r.readContinuous(ctx, json.NewDecoder(newlineWatch{resp.Body, r.heard}), since)
	}
	return r.readNormal(ctx, resp.Body)
}

func (r *changesReader) emit(ctx context.Context, c change) error {
	if r.clientFilter && c.ID != "" {
		if r.docIDs == nil {
			r.docIDs = map[string]bool{}
			for _, id := range r.rep.DocIDs {
				r.docIDs[id] = true
			}
		}
		if !r.docIDs[c.ID] {
			return nil
		}
	}
	if r.maxIDLen > 0 && len(c.ID) > r.maxIDLen {
		// Skipped and counted as a write failure (logged there); its seq
		// still goes out as a marker so the through_seq (and checkpoint)
		// moves past it.
		if r.onIDTooLong != nil {
			if err := r.onIDTooLong(c); err != nil {
				// The run ends here (doc_write_failure "fail"): what was
				// handed on before is written first, so that its final
				// checkpoint gets as far as this change.
				if r.through != nil {
					if werr := r.through(ctx, *r.sent.Load()); werr != nil {
						return werr
					}
				}
				return err
			}
		}
		if c.Seq == nil {
			return nil
		}
		c = change{LastSeq: c.Seq}
	}
	select {
	case r.out <- c:
		r.group.totals.changesRead.Add(1)
		seq := c.Seq
		if c.ID == "" {
			seq = c.LastSeq
		}
		r.sent.Store(&seq)
		r.rows++
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// idPrefix is the start of a too long doc id, as logs show it.
func idPrefix(id string) string {
	const n = 64
	if len(id) <= n {
		return id
	}
	return strings.ToValidUTF8(id[:n], "") + "..."
}

func (r *changesReader) readNormal(ctx context.Context, body io.Reader) (bool, json.RawMessage, error) {
	var last json.RawMessage
	progressed := false
	f := &feedScanner{r: body}
	err := f.rows(func(c change) error {
		if c.ID == "" {
			return nil
		}
		if r.record != nil {
			*r.record = append(*r.record, c)
		}
		if err := r.handOn(ctx, c); err != nil {
			return err
		}
		progressed, last = true, c.Seq
		return nil
	})
	if errors.Is(err, errMalformed) || errors.Is(err, errRowNotObject) {
		err = fmt.Errorf("invalid _changes response: %w", err)
	}
	return progressed, last, err
}

func (r *changesReader) readContinuous(ctx context.Context, dec *json.Decoder, since json.RawMessage) (bool, json.RawMessage, error) {
	var last json.RawMessage
	progressed := false
	for {
		var c change
		if err := dec.Decode(&c); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return progressed, last, err
		}
		if c.LastSeq != nil && c.ID == "" {
			if !bytes.Equal(c.LastSeq, since) && !bytes.Equal(c.LastSeq, last) {
				if err := r.handOn(ctx, change{LastSeq: c.LastSeq}); err != nil {
					return progressed, last, err
				}
			}
			return progressed, c.LastSeq, nil
		}
		if c.ID == "" {
			continue
		}
		if err := r.handOn(ctx, c); err != nil {
			return progressed, last, err
		}
		progressed, last = true, c.Seq
	}
}
