package couchapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

var errKeysIncompatible = &hooks.Error{Status: 400, Err: "query_parse_error", Reason: "`keys` is incompatible with `key`, `start_key` and `end_key`"}

// allDocsQuery holds the parsed query of _all_docs (and _all_dbs).
type allDocsQuery struct {
	StartKey, EndKey *string
	Keys             []string
	KeysGiven        bool
	InclusiveEnd     bool
	Descending       bool
	Skip             int
	Limit            int // -1 = none
	IncludeDocs      bool
	Conflicts        bool
	Attachments      bool
	AttEncodingInfo  bool
	UpdateSeq        bool
}

// jsonKey decodes a JSON-encoded key parameter; non-string keys give nil
// (they collate before every string id) and ok=false when malformed.
func jsonKey(v string) (*string, *hooks.Error) {
	var k any
	if err := json.Unmarshal([]byte(v), &k); err != nil {
		return nil, badRequest("invalid key parameter: " + v)
	}
	if s, ok := k.(string); ok {
		return &s, nil
	}
	return nil, nil
}

func parseAllDocsQuery(q url.Values) (allDocsQuery, *hooks.Error) {
	o := allDocsQuery{InclusiveEnd: true, Limit: -1}
	var herr *hooks.Error
	for _, k := range []string{"startkey", "start_key", "startkey_docid", "start_key_doc_id"} {
		if v := q.Get(k); v != "" {
			if strings.HasSuffix(k, "id") {
				s := v
				o.StartKey = &s
			} else if o.StartKey, herr = jsonKey(v); herr != nil {
				return o, herr
			}
		}
	}
	for _, k := range []string{"endkey", "end_key", "endkey_docid", "end_key_doc_id"} {
		if v := q.Get(k); v != "" {
			if strings.HasSuffix(k, "id") {
				s := v
				o.EndKey = &s
			} else if o.EndKey, herr = jsonKey(v); herr != nil {
				return o, herr
			}
		}
	}
	if v := q.Get("key"); v != "" {
		k, herr := jsonKey(v)
		if herr != nil {
			return o, herr
		}
		if k == nil {
			empty := "\x00nokey"
			k = &empty
		}
		o.StartKey, o.EndKey, o.InclusiveEnd = k, k, true
	}
	if q.Get("keys") != "" && (q.Get("key") != "" || q.Get("startkey") != "" || q.Get("start_key") != "" ||
		q.Get("endkey") != "" || q.Get("end_key") != "") {
		return o, errKeysIncompatible
	}
	if v := q.Get("keys"); v != "" {
		var keys []any
		if err := json.Unmarshal([]byte(v), &keys); err != nil {
			return o, badRequest("`keys` parameter must be an array.")
		}
		o.setKeys(keys)
	}
	o.InclusiveEnd = q.Get("inclusive_end") != "false"
	o.Descending = q.Get("descending") == "true"
	o.IncludeDocs = q.Get("include_docs") == "true"
	o.Conflicts = q.Get("conflicts") == "true"
	o.Attachments = q.Get("attachments") == "true"
	o.AttEncodingInfo = q.Get("att_encoding_info") == "true"
	o.UpdateSeq = q.Get("update_seq") == "true"
	if v := q.Get("skip"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, badRequest("Invalid value for integer: \"" + v + "\"")
		}
		o.Skip = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, badRequest("Invalid value for integer: \"" + v + "\"")
		}
		o.Limit = n
	}
	return o, nil
}

func (o *allDocsQuery) setKeys(keys []any) {
	o.KeysGiven = true
	o.Keys = make([]string, 0, len(keys))
	for _, k := range keys {
		s, _ := k.(string)
		o.Keys = append(o.Keys, s)
	}
}

// allDocs serves _all_docs, _design_docs and _local_docs (kind "all",
// "design", "local").
func (s *Server) allDocs(d *dbReq, kind string) {
	o, herr := parseAllDocsQuery(d.r.URL.Query())
	if herr != nil {
		writeError(d.w, herr)
		return
	}
	if d.r.Method == "POST" {
		var body struct {
			Keys *[]any `json:"keys"`
		}
		if herr := readJSONRequest(d.r, &body); herr != nil {
			writeError(d.w, herr)
			return
		}
		if body.Keys != nil {
			q := d.r.URL.Query()
			if q.Get("key") != "" || q.Get("startkey") != "" || q.Get("start_key") != "" || q.Get("endkey") != "" || q.Get("end_key") != "" {
				writeError(d.w, errKeysIncompatible)
				return
			}
			o.setKeys(*body.Keys)
		}
	}
	if kind == "design" && !o.KeysGiven {
		lo, hi := store.DesignPrefix, "_design0"
		if o.Descending {
			lo, hi = hi, lo
		}
		if o.StartKey == nil || (!o.Descending && *o.StartKey < lo) || (o.Descending && *o.StartKey > lo) {
			o.StartKey = &lo
		}
		if o.EndKey == nil || (!o.Descending && *o.EndKey > hi) || (o.Descending && *o.EndKey < hi) {
			o.EndKey = &hi
		}
	}
	sopts := store.AllDocsOptions{StartKey: o.StartKey, EndKey: o.EndKey, ExclusiveEnd: !o.InclusiveEnd,
		Descending: o.Descending, Skip: o.Skip}
	if o.KeysGiven {
		sopts.Keys = o.Keys
	}
	if o.Limit > 0 {
		sopts.Limit = o.Limit
	}
	seq := d.db.UpdateSeq()
	setJSONHeaders(d.w)
	bw := bufio.NewWriterSize(d.w, 64<<10)
	started := false
	n := 0
	var rowErr error
	start := func(res store.AllDocsResult) {
		if started {
			return
		}
		started = true
		d.w.WriteHeader(200)
		if kind == "local" {
			bw.WriteString(`{"total_rows":null,"offset":null`)
		} else if o.Keys != nil {
			// With keys there is no one offset: CouchDB says null.
			bw.WriteString(`{"total_rows":` + strconv.FormatUint(res.TotalRows, 10) + `,"offset":null`)
		} else {
			bw.WriteString(`{"total_rows":` + strconv.FormatUint(res.TotalRows, 10) + `,"offset":` + strconv.FormatUint(res.Offset, 10))
		}
		if o.UpdateSeq {
			bw.WriteString(`,"update_seq":`)
			bw.Write(jsonobj.AppendString(nil, s.seqs.format(seq, d.db.UUID())))
		}
		bw.WriteString(`,"rows":[`)
	}
	sopts.Start = start
	iter := d.db.AllDocs
	if kind == "local" {
		iter = d.db.LocalDocs
	}
	res, err := iter(d.ctx(), sopts, func(row store.AllDocsRow) error {
		if o.Limit == 0 {
			return store.ErrStop
		}
		if n > 0 {
			bw.WriteString(",\r\n")
		} else {
			bw.WriteString("\r\n")
		}
		n++
		if rowErr = s.writeAllDocsRow(d, bw, row, o); rowErr != nil {
			return rowErr
		}
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrStop) {
		if !started {
			writeError(d.w, err)
			return
		}
		s.log.Debug("_all_docs stream ended early", "db", d.name, "error", err)
	}
	start(res)
	if n > 0 {
		bw.WriteString("\r\n")
	}
	bw.WriteString("]}\n")
	if err := bw.Flush(); err != nil || rowErr != nil {
		s.log.Debug("_all_docs stream ended early", "db", d.name)
	}
}

func (s *Server) writeAllDocsRow(d *dbReq, bw *bufio.Writer, row store.AllDocsRow, o allDocsQuery) error {
	if row.Missing {
		bw.WriteString(`{"key":`)
		bw.Write(jsonobj.AppendString(nil, row.ID))
		bw.WriteString(`,"error":"not_found"}`)
		return nil
	}
	bw.WriteString(`{"id":`)
	bw.Write(jsonobj.AppendString(nil, row.ID))
	bw.WriteString(`,"key":`)
	bw.Write(jsonobj.AppendString(nil, row.ID))
	bw.WriteString(`,"value":{"rev":`)
	bw.Write(jsonobj.AppendString(nil, row.Rev))
	if row.Deleted {
		bw.WriteString(`,"deleted":true}`)
		if o.IncludeDocs {
			bw.WriteString(`,"doc":null`)
		}
		bw.WriteString(`}`)
		return nil
	}
	bw.WriteString(`}`)
	if o.IncludeDocs {
		doc, err := d.db.Get(d.ctx(), row.ID, store.GetOptions{Rev: row.Rev, Conflicts: o.Conflicts, Attachments: o.Attachments, AttEncodingInfo: o.AttEncodingInfo})
		if err != nil {
			bw.WriteString(`,"doc":null}`)
			return nil
		}
		if o.Conflicts && doc.Conflicts == nil {
			if cur, err := d.db.Get(d.ctx(), row.ID, store.GetOptions{Conflicts: true}); err == nil {
				doc.Conflicts = cur.Conflicts
			}
		}
		bw.WriteString(`,"doc":`)
		if err := s.writeDoc(d, bw, doc); err != nil {
			return err
		}
	}
	bw.WriteString(`}`)
	return nil
}
