package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Every feed request asks the source for `timeout=feedTimeout`: a live
// CouchDB-compatible source says something within it (a row, a heartbeat
// newline, or the end of the response). The reader keeps since when it
// has waited on its source without hearing from it (run.unheardSince):
// the client's inactivity timeout (connection_timeout, 3 × feedTimeout
// by default, as CouchDB's) ends a silent request, which is retried like
// any failure, and the stall watch ends a run whose source has been
// overdue by stall_timeout_sec, whatever it knows of the source's
// position (stall.go).

// feedTimeout is the `timeout` a feed request asks for: a third of
// connection_timeout, at least a second (CouchDB's).
func feedTimeout(connectionTimeoutMs int) time.Duration {
	return time.Duration(max(1000, connectionTimeoutMs/3)) * time.Millisecond
}

// probeTimeout bounds one look at the source's position (GET {db}, the
// `limit=0` pending probe): a request the source answers at once, given
// no longer than a feed's timeout, and at most 10 s so that a source
// that never answers it delays nothing for long.
func probeTimeout(connectionTimeoutMs int) time.Duration {
	return min(feedTimeout(connectionTimeoutMs), 10*time.Second)
}

// listening marks that the reader waits on its source: since now, unless
// it already did.
func (r *changesReader) listening() {
	if r.unheard != nil {
		r.unheard.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// heard marks that the source said something (or that the reader, busy
// handing on what it read, was not waiting on it).
func (r *changesReader) heard() {
	if r.unheard != nil {
		r.unheard.Store(time.Now().UnixNano())
	}
}

// unlisten marks that the reader waits on something other than its
// source (a round's changes being written, a slot, the source's signal).
func (r *changesReader) unlisten() {
	if r.unheard != nil {
		r.unheard.Store(0)
	}
}

// unheardFor is how long the reader has waited on its source without
// hearing from it (0 when it does not wait on it).
func (r *changesReader) unheardFor() time.Duration {
	if r.unheard == nil {
		return 0
	}
	since := r.unheard.Load()
	if since == 0 {
		return 0
	}
	return time.Since(time.Unix(0, since))
}

// handOn emits c, a change the source sent: the time it waits for room
// in the batch queue is not time spent waiting on the source.
func (r *changesReader) handOn(ctx context.Context, c change) error {
	r.unlisten()
	err := r.emit(ctx, c)
	r.heard()
	return err
}

// newlineWatch passes a continuous feed's body on, calling heard at each
// newline: every row ends with one, and a heartbeat is one.
type newlineWatch struct {
	r     io.Reader
	heard func()
}

func (w newlineWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 && bytes.IndexByte(p[:n], '\n') >= 0 {
		w.heard()
	}
	return n, err
}

// deadFeed is the error of a feed that said nothing within
// connection_timeout, again and again: CouchDB's changes_reader_died.
func (r *changesReader) deadFeed(silent time.Duration, attempts int) *Error {
	return newError("changes_reader_died", fmt.Sprintf(
		"timeout: the source's changes feed said nothing for %s (failed requests: %d, each asking for timeout=%d and cut after connection_timeout %d ms of silence)",
		silent.Round(time.Second), attempts, int(feedTimeout(r.rep.ConnectionTimeout)/time.Millisecond), r.rep.ConnectionTimeout), false)
}

// seqPrefix reads the number a CouchDB sequence starts with: the number
// itself, or N of a clustered "N-…" seq (the sum of its shards' seqs).
// It is a hint of the position, good for an estimate of changes_pending,
// never a position to checkpoint or compare for equality.
func seqPrefix(seq json.RawMessage) (int64, bool) {
	if n, err := strconv.ParseInt(string(seq), 10, 64); err == nil {
		return n, true
	}
	var s string
	if json.Unmarshal(seq, &s) != nil {
		return 0, false
	}
	head, _, _ := strings.Cut(s, "-")
	n, err := strconv.ParseInt(head, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
