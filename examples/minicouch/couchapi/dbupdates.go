package couchapi

import (
	"bufio"
	"context"
	"strconv"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// handleDBUpdates is GET/POST /_db_updates (server admins): the newest
// event of every database (created, updated, deleted) since a sequence,
// as feed=normal, longpoll, continuous or eventsource, with since (0, now,
// or a sequence), limit, timeout and heartbeat as for _changes.
func (s *Server) handleDBUpdates(q *request) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	qs := q.r.URL.Query()
	feed := qs.Get("feed")
	switch feed {
	case "":
		feed = "normal"
	case "normal", "longpoll", "continuous", "eventsource":
	default:
		writeError(q.w, badRequest("Supported `feed` types: normal, continuous, longpoll, eventsource"))
		return
	}
	uuid, _ := s.cfg.Get("couchdb", "uuid")
	since, ok := parseSince(qs.Get("since"), s.store.DBUpdatesSeq(), uuid)
	if !ok {
		writeError(q.w, badRequest("Malformed sequence supplied in 'since' parameter."))
		return
	}
	limit := 0
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(q.w, badRequest("Invalid value for integer: \""+v+"\""))
			return
		}
		limit = n
	}
	timeout := 60 * time.Second
	if v := qs.Get("timeout"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(q.w, badRequest("Invalid value for integer: \""+v+"\""))
			return
		}
		timeout = time.Duration(n) * time.Millisecond
	}
	var heartbeat time.Duration
	if v := qs.Get("heartbeat"); v == "true" {
		heartbeat = 60 * time.Second
	} else if v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeError(q.w, badRequest("Invalid heartbeat value. Expecting a positive integer value (or `true`)."))
			return
		}
		heartbeat = time.Duration(n) * time.Millisecond
	}
	seqStr := func(n uint64) string { return s.seqs.format(n, uuid) }
	row := func(u store.DBUpdate) []byte {
		b := []byte(`{"db_name":`)
		b = jsonobj.AppendString(b, u.DBName)
		b = append(b, `,"type":"`+u.Type+`","seq":`...)
		return append(jsonobj.AppendString(b, seqStr(u.Seq)), '}')
	}
	ctx, cancel := context.WithTimeout(q.r.Context(), timeout)
	defer cancel()
	w := bufio.NewWriter(q.w)
	defer w.Flush()
	flush := func() {
		w.Flush()
		if f, ok := q.w.(interface{ Flush() }); ok {
			f.Flush()
		}
	}
	last, sent := since, 0
	read := func() error {
		left := 0 // all
		if limit > 0 {
			if left = limit - sent; left <= 0 {
				return nil
			}
		}
		return s.store.DBUpdates(last, left, func(u store.DBUpdate) error {
			switch feed {
			case "continuous":
				w.Write(row(u))
				w.WriteByte('\n')
			case "eventsource":
				w.WriteString("data: ")
				w.Write(row(u))
				w.WriteString("\nid: " + seqStr(u.Seq) + "\n\n")
			default:
				if sent > 0 {
					w.WriteString(",\n")
				}
				w.Write(row(u))
			}
			last, sent = u.Seq, sent+1
			return nil
		})
	}
	// wait blocks for the next event, writing heartbeats; false at the end.
	wait := func() bool {
		for {
			wctx, wcancel := ctx, context.CancelFunc(func() {})
			if heartbeat > 0 {
				wctx, wcancel = context.WithTimeout(ctx, heartbeat)
			}
			_, err := s.store.WaitDBUpdates(wctx, last)
			wcancel()
			if err == nil {
				return true
			}
			if ctx.Err() != nil {
				return false
			}
			w.WriteByte('\n')
			flush()
		}
	}
	switch feed {
	case "continuous", "eventsource":
		ct := "application/json"
		if feed == "eventsource" {
			ct = "text/event-stream"
		}
		q.w.Header().Set("Content-Type", ct)
		q.w.Header().Set("Cache-Control", "must-revalidate")
		q.w.WriteHeader(200)
		for {
			if err := read(); err != nil || limit > 0 && sent >= limit {
				break
			}
			flush()
			if !wait() {
				break
			}
		}
		if feed == "continuous" {
			w.WriteString(`{"last_seq":`)
			w.Write(jsonobj.AppendString(nil, seqStr(last)))
			w.WriteString("}\n")
		}
	default:
		setJSONHeaders(q.w)
		q.w.WriteHeader(200)
		w.WriteString(`{"results":[` + "\n")
		err := read()
		if err == nil && sent == 0 && feed == "longpoll" && wait() {
			err = read()
		}
		w.WriteString("\n],\n\"last_seq\":")
		w.Write(jsonobj.AppendString(nil, seqStr(last)))
		w.WriteString("}\n")
	}
}
