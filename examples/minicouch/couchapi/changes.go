package couchapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/jsfilter"
	"github.com/couchepi/couchepi/examples/minicouch/mango"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// changesReq is a parsed _changes request.
type changesReq struct {
	feed        string
	since       uint64
	limit       int // -1 = none
	descending  bool
	allDocs     bool
	includeDocs bool
	conflicts   bool
	attachments bool
	encInfo     bool // att_encoding_info
	heartbeat   time.Duration
	timeout     time.Duration
	seqInterval int
	rows        int // rows sent so far, over every batch of the feed
	filter      func(id string, doc func() ([]byte, error)) (bool, error)
	// byID: the filter picks docs by id (_doc_ids, _design). CouchDB folds
	// over those docs only, so its pending counts every other change too.
	byID bool
	body []byte // a POST's body, part of the normal feed's ETag
}

// changes is GET/POST /{db}/_changes with every feed type and filter.
func (s *Server) changes(d *dbReq) {
	c, herr := s.parseChanges(d)
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	switch c.feed {
	case "normal", "longpoll":
		s.changesNormal(d, c)
	case "continuous", "eventsource":
		s.changesStream(d, c)
	default:
		writeError(d.w, badRequest("Supported `feed` types: normal, continuous, live, longpoll, eventsource"))
	}
}

func (s *Server) parseChanges(d *dbReq) (*changesReq, *hooks.Error) {
	q := d.r.URL.Query()
	c := &changesReq{feed: "normal", limit: -1}
	if f := q.Get("feed"); f != "" {
		c.feed = f
		if f == "live" {
			c.feed = "continuous"
		}
	}
	var body struct {
		DocIDs   *[]any          `json:"doc_ids"`
		Selector json.RawMessage `json:"selector"`
		Since    any             `json:"since"`
	}
	if d.r.Method == "POST" {
		b, herr := readBody(d.r)
		if herr != nil {
			return nil, herr
		}
		c.body = b
		if len(strings.TrimSpace(string(b))) > 0 {
			if herr := decodeJSON(b, &body); herr != nil {
				return nil, herr
			}
		}
	}
	since := q.Get("since")
	if since == "" && body.Since != nil {
		since = sinceParam(body.Since)
	}
	if c.feed == "eventsource" && since == "" {
		since = d.r.Header.Get("Last-Event-ID")
	}
	c.descending = q.Get("descending") == "true"
	cur := d.db.UpdateSeq()
	var ok bool
	if c.since, ok = parseSince(since, cur, d.db.UUID()); !ok {
		return nil, errBadSince
	}
	if c.descending && since == "" {
		c.since = 0
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, badRequest("Invalid value for integer: \"" + v + "\"")
		}
		c.limit = n
	}
	c.allDocs = q.Get("style") == "all_docs"
	c.includeDocs = q.Get("include_docs") == "true"
	c.conflicts = q.Get("conflicts") == "true"
	c.attachments = q.Get("attachments") == "true"
	c.encInfo = q.Get("att_encoding_info") == "true"
	if v := q.Get("heartbeat"); v != "" {
		if v == "true" {
			c.heartbeat = 60 * time.Second
		} else if n, err := strconv.Atoi(v); err == nil && n > 0 {
			c.heartbeat = time.Duration(n) * time.Millisecond
		} else {
			return nil, badRequest("Invalid heartbeat value. Expecting a positive integer value (or `true`).")
		}
	}
	c.timeout = time.Duration(s.cfg.Int("chttpd", "changes_timeout", 60000)) * time.Millisecond
	if v := q.Get("timeout"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, badRequest("Invalid value for integer: \"" + v + "\"")
		}
		c.timeout = time.Duration(n) * time.Millisecond
	}
	if v := q.Get("seq_interval"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, badRequest("Invalid value for integer: \"" + v + "\"")
		}
		c.seqInterval = n
	}
	herr := s.changesFilter(d, c, q.Get("filter"), body.DocIDs, body.Selector)
	return c, herr
}

// changesFilter installs the filter named by `filter`.
func (s *Server) changesFilter(d *dbReq, c *changesReq, name string, bodyIDs *[]any, selector json.RawMessage) *hooks.Error {
	q := d.r.URL.Query()
	switch {
	case name == "":
		return nil
	case name == "_doc_ids":
		var ids []any
		if bodyIDs != nil {
			ids = *bodyIDs
		} else if v := q.Get("doc_ids"); v != "" {
			if err := json.Unmarshal([]byte(v), &ids); err != nil {
				return badRequest("`doc_ids` filter parameter is not a list of doc ids.")
			}
		} else {
			return badRequest("`doc_ids` filter parameter is not a list of doc ids.")
		}
		set := map[string]bool{}
		for _, id := range ids {
			s, ok := id.(string)
			if !ok {
				return badRequest("`doc_ids` filter parameter is not a list of doc ids.")
			}
			set[s] = true
		}
		c.filter = func(id string, _ func() ([]byte, error)) (bool, error) { return set[id], nil }
		c.byID = true
	case name == "_design":
		c.filter = func(id string, _ func() ([]byte, error)) (bool, error) {
			return strings.HasPrefix(id, store.DesignPrefix), nil
		}
		c.byID = true
	case name == "_selector":
		if d.r.Method != http.MethodPost {
			return badRequest("Selector must be specified in POST payload")
		}
		if len(selector) == 0 {
			selector = json.RawMessage("null") // CouchDB: "expected a JSON object"
		}
		sel, err := mango.Parse(selector)
		if err != nil {
			return badRequest(err.Error())
		}
		c.filter = func(_ string, doc func() ([]byte, error)) (bool, error) {
			b, err := doc()
			if err != nil {
				return false, err
			}
			return sel.MatchJSON(b), nil
		}
	case name == "_view":
		ddoc, view, ok := strings.Cut(q.Get("view"), "/")
		if !ok || ddoc == "" || view == "" {
			return badRequest("`view` filter parameter is not provided.")
		}
		src, herr := s.designFunction(d, ddoc, "views", view, "map")
		if herr != nil {
			return herr
		}
		f, err := jsfilter.NewViewFilter(src)
		if err != nil {
			return &hooks.Error{Status: 400, Err: "compilation_error", Reason: err.Error()}
		}
		c.filter = jsPass(f)
	default:
		ddoc, fname, ok := strings.Cut(name, "/")
		if !ok || ddoc == "" || fname == "" {
			return badRequest("`filter` must be of the form `designname/filtername`")
		}
		src, herr := s.designFunction(d, ddoc, "filters", fname, "")
		if herr != nil {
			return herr
		}
		query := map[string]string{}
		for k, v := range q {
			if len(v) > 0 {
				query[k] = v[0]
			}
		}
		uc, _ := jsonobj.Marshal(d.user)
		f, err := jsfilter.NewFilter(src, jsfilter.Request{Query: query, UserCtx: uc, Method: d.r.Method,
			Path: []string{d.name, "_changes"}})
		if err != nil {
			return &hooks.Error{Status: 400, Err: "compilation_error", Reason: err.Error()}
		}
		c.filter = jsPass(f)
	}
	return nil
}

func jsPass(f *jsfilter.Filter) func(string, func() ([]byte, error)) (bool, error) {
	return func(_ string, doc func() ([]byte, error)) (bool, error) {
		b, err := doc()
		if err != nil {
			return false, err
		}
		return f.Pass(b)
	}
}

// designFunction returns the source at ddoc.<section>.<name>[.<sub>] with
// CouchDB's `missing json key` errors.
func (s *Server) designFunction(d *dbReq, ddoc, section, name, sub string) (string, *hooks.Error) {
	doc, err := d.db.Get(d.ctx(), store.DesignPrefix+ddoc, store.GetOptions{})
	if err != nil {
		return "", asCouchError(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc.Body, &m); err != nil {
		return "", badRequest("invalid design document")
	}
	var sec map[string]json.RawMessage
	if raw, ok := m[section]; !ok || json.Unmarshal(raw, &sec) != nil {
		return "", &hooks.Error{Status: 404, Err: "not_found", Reason: "missing json key: " + section}
	}
	raw, ok := sec[name]
	if !ok {
		return "", &hooks.Error{Status: 404, Err: "not_found", Reason: "missing json key: " + name}
	}
	if sub != "" {
		var inner map[string]json.RawMessage
		if json.Unmarshal(raw, &inner) != nil {
			return "", &hooks.Error{Status: 404, Err: "not_found", Reason: "missing json key: " + sub}
		}
		if raw, ok = inner[sub]; !ok {
			return "", &hooks.Error{Status: 404, Err: "not_found", Reason: "missing json key: " + sub}
		}
	}
	var src string
	if json.Unmarshal(raw, &src) != nil {
		return "", badRequest("design function is not a string")
	}
	return src, nil
}

// winnerDoc reads the winning revision of id, including a deleted one.
func winnerDoc(ctx context.Context, db *store.DB, id string, opts store.GetOptions) (*store.DocRev, error) {
	doc, err := db.Get(ctx, id, opts)
	if errors.Is(err, store.ErrDeleted) {
		revs, err2 := db.OpenRevs(ctx, id, nil, opts)
		if err2 != nil {
			return nil, err2
		}
		if w := pickWinner(revs); w != nil {
			return w, nil
		}
	}
	return doc, err
}

// defaultChangesLimit is CouchDB's limit of a changes request that names
// none; seq_interval counts from it.
const defaultChangesLimit = 1_000_000_000_000_000

// seqShown reports whether the next row carries its seq under
// seq_interval. CouchDB counts the request's limit down by one per row
// over the whole feed and shows the seq when what remains is a multiple of
// the interval, so with no limit (10^15) the first row always has one.
func (c *changesReq) seqShown() bool {
	if c.seqInterval <= 1 {
		return true
	}
	left := int64(defaultChangesLimit)
	if c.limit >= 0 {
		left = int64(c.limit)
	}
	return (left-int64(c.rows))%int64(c.seqInterval) == 0
}

// changeRow renders one change row, or nil when the filter drops it.
func (s *Server) changeRow(d *dbReq, c *changesReq, ch store.Change) ([]byte, error) {
	var cached []byte
	loadDoc := func() ([]byte, error) {
		if cached != nil {
			return cached, nil
		}
		doc, err := winnerDoc(d.ctx(), d.db, ch.ID, store.GetOptions{})
		if err != nil {
			return nil, err
		}
		cached, err = doc.MarshalJSON()
		return cached, err
	}
	if c.filter != nil {
		ok, err := c.filter(ch.ID, loadDoc)
		if err != nil {
			s.log.Debug("changes filter failed on doc", "db", d.name, "id", ch.ID, "error", err)
			return nil, &filterError{err}
		}
		if !ok {
			return nil, nil
		}
	}
	buf := make([]byte, 0, 128)
	buf = append(buf, `{"seq":`...)
	if !c.seqShown() {
		buf = append(buf, "null"...)
	} else {
		buf = jsonobj.AppendString(buf, s.seqs.format(ch.Seq, d.db.UUID()))
	}
	buf = append(buf, `,"id":`...)
	buf = jsonobj.AppendString(buf, ch.ID)
	buf = append(buf, `,"changes":[`...)
	revs := ch.Revs
	if !c.allDocs && len(revs) > 1 {
		revs = revs[:1]
	}
	for i, r := range revs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"rev":`...)
		buf = jsonobj.AppendString(buf, r)
		buf = append(buf, '}')
	}
	buf = append(buf, ']')
	if ch.Deleted {
		buf = append(buf, `,"deleted":true`...)
	}
	if c.includeDocs {
		doc, err := winnerDoc(d.ctx(), d.db, ch.ID, store.GetOptions{Conflicts: c.conflicts, Attachments: c.attachments, AttEncodingInfo: c.encInfo})
		if err != nil {
			return nil, err
		}
		body, err := s.renderDoc(d, doc, false)
		if err != nil {
			return nil, err
		}
		buf = append(buf, `,"doc":`...)
		buf = append(buf, body...)
	}
	return append(buf, '}'), nil
}

// scan reads changes after since and calls emit for each row passing the
// filter, up to max rows (-1 = no bound). It returns the last seq examined
// and the pending count.
func (s *Server) scan(d *dbReq, c *changesReq, since uint64, max int, emit func([]byte) error) (uint64, int64, int, error) {
	if max == 0 {
		pending, err := s.countAfter(d, since, c.descending)
		return since, pending, 0, err
	}
	n := 0
	last := since
	opts := store.ChangesOptions{Since: since, Descending: c.descending}
	if c.filter == nil && max > 0 {
		opts.Limit = max
	}
	res, err := d.db.Changes(d.ctx(), opts, func(ch store.Change) error {
		row, err := s.changeRow(d, c, ch)
		if err != nil {
			return err
		}
		last = ch.Seq
		if row == nil {
			return nil
		}
		n++
		c.rows++
		if err := emit(row); err != nil {
			return err
		}
		if c.filter != nil && max > 0 && n >= max {
			return store.ErrStop
		}
		return nil
	})
	if err != nil {
		return last, res.Pending, n, err
	}
	if c.descending && n == 0 && last == 0 {
		last = d.db.UpdateSeq()
	}
	if c.byID && !c.descending {
		// As CouchDB: the changes after since it did not fold over.
		total, err := s.countAfter(d, since, false)
		pending := total - int64(n)
		if pending < 0 {
			pending = 0
		}
		return last, pending, n, err
	}
	return last, res.Pending, n, nil
}

// countAfter counts the changes after seq (ascending feeds; 0 otherwise).
func (s *Server) countAfter(d *dbReq, seq uint64, descending bool) (int64, error) {
	if descending {
		return 0, nil
	}
	got := false
	res, err := d.db.Changes(d.ctx(), store.ChangesOptions{Since: seq, Limit: 1}, func(store.Change) error {
		got = true
		return nil
	})
	if err != nil || !got {
		return 0, err
	}
	return res.Pending + 1, nil
}

// filterError is a filter function failing on a document; it fails the
// request when nothing was sent yet.
type filterError struct{ err error }

// Error is the filter's failure.
func (e *filterError) Error() string { return e.err.Error() }

// changesNormal serves feed=normal and feed=longpoll. The response starts
// with the first row (or at the end), so a filter that fails before any
// row was sent fails the request with a CouchDB error.
func (s *Server) changesNormal(d *dbReq, c *changesReq) {
	if c.feed == "normal" {
		// As CouchDB: the normal feed's ETag, on GET, HEAD and POST, follows
		// the db's state (and here the query and body too, so another query
		// is never answered 304).
		etag := etagOf(d.db.UUID(), strconv.FormatUint(d.db.UpdateSeq(), 10), d.r.URL.RawQuery, string(c.body))
		if notModified(d.w, d.r, etag) {
			return
		}
	}
	bw := bufio.NewWriterSize(d.w, 64<<10)
	started := false
	begin := func() {
		if started {
			return
		}
		started = true
		setJSONHeaders(d.w)
		d.w.WriteHeader(200)
		bw.WriteString(`{"results":[` + "\n")
	}
	first := true
	emit := func(row []byte) error {
		begin()
		if !first {
			bw.WriteString(",\n")
		}
		first = false
		_, err := bw.Write(row)
		return err
	}
	last, pending, n, err := s.scan(d, c, c.since, c.limit, emit)
	if err == nil && n == 0 && c.feed == "longpoll" && c.limit != 0 {
		last, pending, err = s.longpollWait(d, c, bw, last, begin, emit)
	}
	if err != nil {
		var fe *filterError
		if errors.As(err, &fe) && !started {
			writeError(d.w, &hooks.Error{Status: 500, Err: "os_process_error", Reason: fe.Error()})
			return
		}
		s.log.Debug("changes feed ended early", "db", d.name, "error", err)
	}
	begin()
	if !first {
		bw.WriteString("\n")
	}
	bw.WriteString("],\n" + `"last_seq":`)
	bw.Write(jsonobj.AppendString(nil, s.seqs.format(last, d.db.UUID())))
	bw.WriteString(`,"pending":` + strconv.FormatInt(pending, 10) + "}\n")
	_ = bw.Flush()
}

// longpollWait waits for the first change that passes the filter, sending
// heartbeat newlines while it waits, until the timeout.
func (s *Server) longpollWait(d *dbReq, c *changesReq, bw *bufio.Writer, since uint64, begin func(), emit func([]byte) error) (uint64, int64, error) {
	deadline := time.Now().Add(c.timeout)
	last := since
	for {
		wait := time.Until(deadline)
		if c.heartbeat > 0 && c.heartbeat < wait {
			wait = c.heartbeat
		}
		if c.heartbeat == 0 && wait <= 0 {
			return last, 0, nil
		}
		ctx, cancel := context.WithTimeout(d.ctx(), wait)
		_, err := d.db.Wait(ctx, last)
		cancel()
		if d.ctx().Err() != nil {
			return last, 0, d.ctx().Err()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return last, 0, err
		}
		if err != nil {
			if c.heartbeat > 0 {
				begin()
				bw.WriteString("\n")
				if bw.Flush() != nil {
					return last, 0, nil
				}
				if f, ok := d.w.(http.Flusher); ok {
					f.Flush()
				}
				continue
			}
			return last, 0, nil
		}
		l, pending, n, err := s.scan(d, c, last, c.limit, emit)
		last = l
		if err != nil || n > 0 {
			return last, pending, err
		}
	}
}

// changesStream serves feed=continuous and feed=eventsource.
func (s *Server) changesStream(d *dbReq, c *changesReq) {
	es := c.feed == "eventsource"
	if es {
		d.w.Header().Set("Content-Type", "text/event-stream")
		d.w.Header().Set("Cache-Control", "no-cache")
	} else {
		setJSONHeaders(d.w)
	}
	d.w.WriteHeader(200)
	flusher, _ := d.w.(http.Flusher)
	bw := bufio.NewWriterSize(d.w, 32<<10)
	flush := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	sent := 0
	var lastSeqStr string
	emit := func(row []byte) error {
		if es {
			var m struct {
				Seq any `json:"seq"`
			}
			_ = json.Unmarshal(row, &m)
			bw.WriteString("data: ")
			bw.Write(row)
			bw.WriteString("\nid: ")
			if s, ok := m.Seq.(string); ok {
				lastSeqStr = s
				bw.WriteString(s)
			} else {
				bw.WriteString(lastSeqStr)
			}
			bw.WriteString("\n\n")
		} else {
			bw.Write(row)
			bw.WriteString("\n")
		}
		sent++
		return flush()
	}
	remaining := func() int {
		if c.limit < 0 {
			return -1
		}
		return c.limit - sent
	}
	last, pending, _, err := s.scan(d, c, c.since, remaining(), emit)
	deadline := time.Now().Add(c.timeout)
	for err == nil && remaining() != 0 && !c.descending {
		wait := time.Until(deadline)
		if c.heartbeat > 0 {
			wait = c.heartbeat
		} else if wait <= 0 {
			break
		}
		ctx, cancel := context.WithTimeout(d.ctx(), wait)
		_, werr := d.db.Wait(ctx, last)
		cancel()
		if d.ctx().Err() != nil {
			return
		}
		if werr != nil {
			if !errors.Is(werr, context.DeadlineExceeded) {
				break
			}
			if c.heartbeat > 0 {
				if es {
					bw.WriteString("event: heartbeat\ndata: \n\n")
				} else {
					bw.WriteString("\n")
				}
				if flush() != nil {
					return
				}
				continue
			}
			break
		}
		var n int
		last, pending, n, err = s.scan(d, c, last, remaining(), emit)
		if n > 0 {
			deadline = time.Now().Add(c.timeout)
		}
	}
	if !es {
		bw.WriteString(`{"last_seq":`)
		bw.Write(jsonobj.AppendString(nil, s.seqs.format(last, d.db.UUID())))
		bw.WriteString(`,"pending":` + strconv.FormatInt(pending, 10) + "}\n")
	}
	_ = flush()
}
