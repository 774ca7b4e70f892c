package replicate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/internal/repeatlog"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/hashicorp/go-hclog"
)

// Timing of a run.
const (
	stopGrace        = 10 * time.Second // in-flight batches may finish after a stop
	finalCheckpoint  = 30 * time.Second // bound of the checkpoint written on stop
	pendingInterval  = 5 * time.Second
	statsMinInterval = time.Second
)

// run is the state of one replication run.
type run struct {
	rep   *parse.Rep
	opts  Options
	group *Group // opts.Group, or the run's own
	log   hclog.Logger
	src   *couchclient.Client
	tgt   *couchclient.Client

	repID     parse.RepID
	sessionID string
	srcKey    string // endpointKey of the source, for sharing fetched revisions
	startTime time.Time
	startSeq  json.RawMessage

	stats       counters
	tracker     *throughTracker
	revsDiffEMA adaptive
	bulkGetEMA  adaptive

	missingDocRetry time.Duration

	srcInfo, tgtInfo dbInfo

	cpMu      sync.Mutex
	cpLines   repeatlog.Failures // failed checkpoints' log lines (cpMu)
	cpQuiet   int                // failed checkpoints since the last line (cpMu)
	history   []json.RawMessage
	existing  *Checkpoint
	srcRev    string
	tgtRev    string
	committed json.RawMessage
	lastBody  []byte
	// sourceRefused is set once the source refused a checkpoint: the
	// run keeps them on the target alone (checkpoint.go).
	sourceRefused atomic.Bool

	errMu    sync.Mutex
	firstErr error

	// lastChange is when the changes feed last delivered a row (Unix ns).
	lastChange atomic.Int64
	// quiet is set while the run has handed its slot on (Options.Slot).
	quiet atomic.Bool
	// progressAt is when a batch last completed (Unix ns; the run's start
	// before the first); behindSince, since when the run has been behind
	// its source (0 while caught up; see stall.go).
	progressAt, behindSince atomic.Int64
	// unheardSince is since when the changes reader has waited on the
	// source without hearing from it (0: not waiting; see liveness.go).
	unheardSince atomic.Int64
}

// dbInfo is what `GET {db}/` tells the replicator.
type dbInfo struct {
	UpdateSeq         json.RawMessage `json:"update_seq"`
	InstanceStartTime json.RawMessage `json:"instance_start_time"`
}

// Run replicates rep until it is done (one-shot) or ctx is cancelled
// (continuous, or a stop). On cancel it writes a final checkpoint within a
// bounded time and returns ErrStopped. Failures are *Error.
func Run(ctx context.Context, rep *parse.Rep, opts Options) (*Result, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Pool == nil {
		opts.Pool = couchclient.NewPool(couchclient.PoolOptions{Logger: opts.Logger})
		defer opts.Pool.Close()
	}
	if opts.Group == nil {
		opts.Group = new(Group)
	}
	r := &run{
		rep:             rep,
		opts:            opts,
		group:           opts.Group,
		log:             opts.Logger.With("source", rep.Source.RedactedURL(), "target", rep.Target.RedactedURL()),
		src:             opts.Pool.Endpoint(rep.Source, rep),
		tgt:             opts.Pool.Endpoint(rep.Target, rep),
		sessionID:       newSessionID(),
		srcKey:          endpointKey(rep),
		startTime:       time.Now(),
		missingDocRetry: missingDocRetry,
	}
	r.stats.bind(&r.group.totals)
	r.src.UseLogger(opts.Logger) // its failures name the job
	r.tgt.UseLogger(opts.Logger)
	if opts.MissingDocRetry > 0 {
		r.missingDocRetry = opts.MissingDocRetry
	}
	if opts.Fence != nil {
		ctx = couchclient.WithFence(ctx, opts.Fence)
	}
	r.progressed()
	if err := r.startWatched(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ErrStopped
		}
		return nil, err
	}
	return r.loop(ctx)
}

// startWatched is start bounded by Options.StallTimeout: a start that
// takes that long (an endpoint that accepts requests and never answers)
// has stalled too.
func (r *run) startWatched(ctx context.Context) error {
	if r.opts.StallTimeout <= 0 {
		return r.start(ctx)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stalled := newError(ErrStalled, fmt.Sprintf("the replication did not start within %s (stall_timeout_sec %d): an endpoint does not answer",
		r.opts.StallTimeout, int(r.opts.StallTimeout/time.Second)), false)
	t := time.AfterFunc(r.opts.StallTimeout, func() { cancel(stalled) })
	defer t.Stop()
	err := r.start(sctx)
	if err != nil && ctx.Err() == nil && context.Cause(sctx) == stalled {
		r.group.totals.stalls.Add(1)
		r.log.Warn("replication stalled at its start", "error", stalled.Reason)
		return stalled
	}
	return err
}

// start opens both endpoints, computes the id and reads the checkpoints,
// or resumes from Options.Resume.
func (r *run) start(ctx context.Context) error {
	resumed, srcDoc, srcRead, err := r.startResumed(ctx)
	if err != nil {
		return err
	}
	if resumed {
		r.group.totals.resumes.Add(1)
		r.log = r.log.With("replication_id", r.repID.String())
		r.startFrom(startPoint{seq: r.opts.Resume.Seq(), history: srcDoc.Body.History})
		return nil
	}
	if r.srcInfo, err = openDB(ctx, r.src); err != nil {
		return err
	}
	if r.rep.CreateTarget {
		if err := createDB(ctx, r.tgt, r.rep.CreateTargetParams); err != nil {
			return err
		}
	}
	if r.tgtInfo, err = openDB(ctx, r.tgt); err != nil {
		return err
	}
	if r.opts.RepID != nil {
		r.repID = *r.opts.RepID
	} else if r.repID, err = ComputeRepID(ctx, r.rep, r.opts.ServerUUID, r.opts.Pool); err != nil {
		return err
	}
	r.log = r.log.With("replication_id", r.repID.String())
	var sp startPoint
	if r.rep.UseCheckpoints {
		s := srcDoc
		if !srcRead && r.rep.Checkpoint != parse.CheckpointTarget {
			if s, err = readCheckpoint(ctx, r.src, r.repID.Base); err != nil {
				return asError(err)
			}
		}
		t, err := readCheckpoint(ctx, r.tgt, r.repID.Base)
		if err != nil {
			return asError(err)
		}
		var sb, tb *Checkpoint
		if s != nil {
			r.srcRev, sb = s.Rev, s.Body
			r.existing = s.Body
		}
		if t != nil {
			r.tgtRev, tb = t.Rev, t.Body
		}
		sp = r.startingPoint(sb, tb)
		if sp.seq == nil && (sb != nil || tb != nil) {
			r.log.Info("no common ancestry -- performing full replication")
		}
	}
	r.startFrom(sp)
	return nil
}

// startFrom sets where the run starts and what it carries over.
func (r *run) startFrom(sp startPoint) {
	r.history = sp.history
	r.startSeq = sp.seq
	if r.startSeq == nil {
		r.startSeq = json.RawMessage("0")
		if len(r.rep.SinceSeq) > 0 {
			r.startSeq = r.rep.SinceSeq
		}
	}
	r.stats.seed(r.opts.StartStats, sp.newest)
	r.committed = r.startSeq
	r.stats.setCheckpointed(r.startSeq)
	r.tracker = newThroughTracker(r.startSeq)
	if r.opts.OnStart != nil {
		r.opts.OnStart(r.snapshot())
	}
	if r.opts.Live != nil {
		r.opts.Live(r.snapshot)
	}
	r.log.Debug("replication starting", "since", string(r.startSeq), "session_id", r.sessionID)
}

// openDB checks that an endpoint exists and reads its info.
func openDB(ctx context.Context, c *couchclient.Client) (dbInfo, error) {
	var info dbInfo
	resp, err := c.Do(ctx, &couchclient.Request{Buffer: true, Method: http.MethodGet, Path: ""})
	if err != nil {
		if mb := maxBackoff(err); mb != nil {
			return info, mb
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return info, newError("nxdomain", "could not resolve "+c.RedactedURL(), false)
		}
		// CouchDB says only "could not open"; since couchepi verifies https
		// peers by default (CouchDB does not), name the certificate problem.
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &certErr) {
			return info, newError("db_not_found", "could not open "+c.RedactedURL()+": "+certErr.Error()+
				" (see [replicator] ssl_trusted_certificates_file and verify_ssl_certificates)", false)
		}
		return info, newError("db_not_found", openFailure(c, err, ""), false)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		drainClose(resp)
		return info, newError("unauthorized", "unauthorized to access or create database "+c.RedactedURL(), true)
	case http.StatusForbidden:
		drainClose(resp)
		return info, newError("forbidden", "forbidden to access database "+c.RedactedURL(), true)
	case http.StatusNotFound:
		drainClose(resp)
		return info, newError("db_not_found", "could not open "+c.RedactedURL(), false)
	default:
		drainClose(resp)
		return info, newError("db_not_found", openFailure(c, nil, resp.Status), false)
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || info.UpdateSeq == nil {
		return info, newError("db_not_found", "could not open "+c.RedactedURL(), false)
	}
	return info, nil
}

// createDB PUTs the target with create_target_params as the query; only
// 401 (unauthorized) and 403 (forbidden) are fatal, as in CouchDB.
func createDB(ctx context.Context, c *couchclient.Client, params json.RawMessage) error {
	resp, err := c.Do(ctx, &couchclient.Request{Buffer: true, Method: http.MethodPut, Path: "", Query: paramsQuery(params)})
	if err != nil {
		return nil // the open that follows reports it
	}
	defer drainClose(resp)
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return newError("unauthorized", "unauthorized to access or create database "+c.RedactedURL(), true)
	case http.StatusForbidden:
		return newError("forbidden", "forbidden to create database "+c.RedactedURL(), true)
	}
	return nil
}

// paramsQuery renders an object as a query string, values stringified.
func paramsQuery(params json.RawMessage) string {
	q := queryParams(params, false)
	if len(q) > 0 {
		return q[1:]
	}
	return ""
}

func newSessionID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setErr records the first failure.
func (r *run) setErr(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.firstErr == nil {
		r.firstErr = err
	}
}

func (r *run) err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}

// loop runs the changes reader, batcher, workers and checkpointer.
func (r *run) loop(parent context.Context) (*Result, error) {
	ctx, cancelRun := context.WithCancelCause(parent)
	defer cancelRun(nil)
	workers := max(1, r.rep.WorkerProcesses)
	batchSize := max(1, r.rep.WorkerBatchSize)
	readerCtx, cancelReader := context.WithCancel(ctx)
	defer cancelReader()
	workCtx, cancelWork := context.WithCancel(r.detached())
	defer cancelWork()
	fail := func(err error) {
		r.setErr(err)
		cancelReader()
		cancelWork()
	}

	// The batcher drains the feed into a growing batch while workers are
	// busy, so the reader needs only a batch of buffer; more would be
	// memory held by each of hundreds of running jobs.
	buffer := min(batchSize, 1024)
	if r.rep.Continuous && r.opts.Slot != nil {
		// Thousands of these may run at once, mostly reading small rounds.
		buffer = min(buffer, 128)
	}
	changes := make(chan change, buffer)
	reader := &changesReader{src: r.src, rep: r.rep, log: r.log, out: changes, wait: 250 * time.Millisecond,
		maxIDLen: r.opts.MaxDocumentIDLength, onIDTooLong: r.idTooLong,
		through: r.tracker.waitThrough, quiet: &r.quiet, srcKey: r.srcKey, group: r.group,
		unheard: &r.unheardSince, retryFor: r.opts.Pool.RetryWindow()}
	if r.rep.Continuous {
		reader.slot = r.opts.Slot
		if r.opts.Woken {
			reader.askedAt = time.Now()
		}
	}
	go func() {
		// The error first, then the end of the feed: the workers finish
		// once changes is closed, and the run then reads r.err().
		defer close(changes)
		if err := reader.run(readerCtx, r.startSeq); err != nil && readerCtx.Err() == nil {
			if !isDocWriteFailure(err) { // an id too long, with doc_write_failure "fail"
				r.group.totals.changesReadFailures.Add(1)
			}
			fail(err)
		}
	}()
	// workers_started counts worker_processes per run, as CouchDB's
	// stat does; the pool starts them as batches need them.
	r.group.totals.workersStarted.Add(int64(workers))
	pool := newWorkerPool(workers, workerIdle, func(b *batch) bool {
		if err := r.process(workCtx, b); err != nil {
			if workCtx.Err() == nil {
				fail(asError(err))
			}
			return false
		}
		r.tracker.complete(b.ord, b.lastSeq)
		r.progressed()
		return true
	})
	go r.batcher(readerCtx, changes, pool, batchSize, &reader.rounds)
	workersDone := pool.done

	bgCtx, stopBg := context.WithCancel(r.detached())
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); r.timers(bgCtx, fail, changes, func() { cancelRun(ErrIdle) }) }()

	stopped := false
	select {
	case <-workersDone:
	case <-ctx.Done():
		stopped = true
		grace := stopGrace
		if errors.Is(context.Cause(ctx), ErrAbandoned) {
			grace = 0
		}
		t := time.NewTimer(grace)
		select {
		case <-workersDone:
		case <-t.C:
			cancelWork()
			<-workersDone
		}
		t.Stop()
	}
	stopBg()
	bg.Wait()
	if ctx.Err() != nil {
		stopped = true
	}

	runErr := r.err()
	if r.rep.UseCheckpoints && !errors.Is(context.Cause(ctx), ErrAbandoned) {
		cctx, cancel := context.WithTimeout(r.detached(), finalCheckpoint)
		if err := r.checkpoint(cctx); err != nil && runErr == nil {
			runErr = err
		}
		cancel()
	}
	if runErr == nil {
		// A failed run keeps the pending last measured: its source may be
		// what failed, and the failure is not held up by one more probe.
		r.updatePending(r.detached())
	}
	stats := r.snapshot()
	if r.opts.OnStats != nil {
		r.opts.OnStats(stats)
	}
	if runErr != nil {
		return nil, asError(runErr)
	}
	if stopped {
		if r.opts.OnResume != nil && r.rep.Continuous {
			if h := r.resume(); h != nil {
				r.opts.OnResume(h)
			}
		}
		if parent.Err() == nil && errors.Is(context.Cause(ctx), ErrIdle) {
			return nil, ErrIdle
		}
		return nil, ErrStopped
	}
	return &Result{Body: r.resultBody(), Stats: stats}, nil
}

// batcher groups changes into batches of up to size, numbered in feed order.
// A batch is handed to the first idle worker; while every worker is busy it
// keeps growing, so a slow worker pool gets full batches and an idle one gets
// changes without delay. While rounds is set (the reader of a run sharing
// a slot reads in rounds), a batch is handed on only once no change has
// come for drainWait, so that a round's changes make one batch (one
// _bulk_docs), not one per idle worker.
func (r *run) batcher(ctx context.Context, in <-chan change, pool *workerPool, size int, rounds *atomic.Bool) {
	defer pool.close()
	send := func(b *batch) bool {
		for !pool.offer(b) {
			select {
			case pool.in <- b:
				return true
			case <-pool.exited: // room for a new worker: offer again
			case <-ctx.Done():
				return false
			}
		}
		return true
	}
	var b *batch
	// take adds c to b, or hands b on and completes a marker; false when
	// the batcher is done.
	take := func(c change, ok bool) bool {
		r.lastChange.Store(time.Now().UnixNano())
		switch {
		case !ok:
			send(b)
			return false
		case c.ID == "" && c.LastSeq != nil:
			if !send(b) {
				return false
			}
			b = nil
			r.tracker.complete(r.tracker.add(), c.LastSeq)
		default:
			b.changes, b.lastSeq = append(b.changes, c), c.Seq
		}
		return true
	}
	drainT := time.NewTimer(time.Hour)
	defer drainT.Stop()
	for {
		if b == nil {
			c, ok := <-in
			if !ok || ctx.Err() != nil {
				return
			}
			r.lastChange.Store(time.Now().UnixNano())
			if c.ID == "" && c.LastSeq != nil {
				r.tracker.complete(r.tracker.add(), c.LastSeq)
				continue
			}
			// Sized to what is waiting, not to size: a batch of a change or
			// two is common, and size (500) changes are 50 KB of garbage.
			b = &batch{ord: r.tracker.add(), changes: make([]change, 0, min(size, len(in)+1))}
			b.changes, b.lastSeq = append(b.changes, c), c.Seq
		}
		if len(b.changes) >= size {
			if !send(b) {
				return
			}
			b = nil
			continue
		}
		if rounds.Load() {
			drainT.Reset(drainWait)
			select {
			case c, ok := <-in:
				if !take(c, ok) {
					return
				}
				continue
			case <-drainT.C:
			case <-ctx.Done():
				return
			}
		}
		if pool.offer(b) {
			b = nil
			continue
		}
		select {
		case pool.in <- b:
			b = nil
		case <-pool.exited: // room for a new worker: offer again
		case c, ok := <-in:
			if !take(c, ok) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// drainWait is how long the batcher of a run sharing a slot waits for more
// of a round's changes before handing a batch on.
const drainWait = 2 * time.Millisecond

func (r *run) snapshot() Stats {
	through, source := r.tracker.seqs()
	s := r.stats.snapshot(through, source)
	s.LastProgress = time.Unix(0, r.progressAt.Load()).Unix()
	if since := r.behindSince.Load(); since != 0 {
		lag := int64(time.Since(time.Unix(0, since)) / time.Second)
		s.LagSec = &lag
	} else if r.quiet.Load() || s.ChangesPending != nil {
		// Caught up as far as the run knows; with no word of the
		// source's position (changes_pending null), lag_sec is null too.
		s.LagSec = new(int64)
	}
	if r.onTargetAlone() {
		s.Checkpoint = parse.CheckpointTarget
	}
	return s
}

// updatePending sets changes_pending: update_seq difference for numeric seqs,
// else what the runs of the source share (sharedPending), else
// `_changes?since=…&limit=0`'s pending; when that fails, the
// difference of the numbers CouchDB's "N-…" seqs start with (seqPrefix),
// else null. Each request has its own deadline (probeTimeout).
func (r *run) updatePending(ctx context.Context) {
	_, source := r.tracker.seqs()
	timeout := probeTimeout(r.rep.ConnectionTimeout)
	updateSeq := func() (json.RawMessage, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return r.sourceUpdateSeq(ctx)
	}
	if n, err := strconv.ParseInt(string(source), 10, 64); err == nil {
		if seq, err := updateSeq(); err == nil {
			if u, err := strconv.ParseInt(string(seq), 10, 64); err == nil {
				p := max(0, u-n)
				r.stats.setPending(&p)
				return
			}
		}
	}
	if p, ok := r.sharedPending(ctx, source, timeout); ok {
		r.stats.setPending(p)
		return
	}
	if p, ok := r.probePending(ctx, source, timeout); ok {
		r.stats.setPending(p)
		return
	}
	if n, ok := seqPrefix(source); ok {
		if seq, err := updateSeq(); err == nil {
			if u, ok := seqPrefix(seq); ok {
				p := max(0, u-n)
				r.stats.setPending(&p)
				return
			}
		}
	}
	r.stats.setPending(nil)
}

// probePending asks the source for `_changes?since=…&limit=0`'s pending;
// false when it does not answer it within timeout.
func (r *run) probePending(ctx context.Context, source json.RawMessage, timeout time.Duration) (*int64, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := r.src.Do(ctx, &couchclient.Request{Buffer: true, Method: http.MethodGet, Path: "_changes",
		Query: "since=" + url.QueryEscape(seqString(source)) + "&limit=0", NoRetry: true})
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var v struct {
		Pending *int64 `json:"pending"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		return nil, false
	}
	return v.Pending, true
}

// fenced reports whether err is, or came while, the run's fence said no:
// the job left this node, and what failed is no failure of the
// replication (its next runner goes on).
func (r *run) fenced(err error) bool {
	return errors.Is(err, couchclient.ErrFenced) || r.opts.Fence != nil && r.opts.Fence() != nil
}

// detached returns a context that outlives the run's (for work that
// must finish after a stop) but keeps its fence.
func (r *run) detached() context.Context {
	if r.opts.Fence != nil {
		return couchclient.WithFence(context.Background(), r.opts.Fence)
	}
	return context.Background()
}

// checkpoint records the through_seq on both endpoints (or the target
// alone, see checkpoint.go), unless it has not moved.
func (r *run) checkpoint(ctx context.Context) (err error) {
	r.cpMu.Lock()
	defer r.cpMu.Unlock()
	through, _ := r.tracker.seqs()
	if bytes.Equal(through, r.committed) {
		return nil
	}
	defer func() {
		failed := r.checkpointFailed(ctx, err)
		r.group.totals.tallyCheckpoint(err, failed)
		if failed {
			r.logCheckpointFailure(through, err)
		}
		if errors.Is(err, ErrSkipCheckpoint) {
			err = nil
		}
	}()
	tgtIST, err := ensureFullCommit(ctx, r.tgt)
	if err != nil {
		return checkpointFailure("target", asError(err).Reason)
	}
	srcIST, err := r.sourceCommit(ctx)
	if err != nil {
		return err
	}
	if !sameInstance(srcIST, seqString(r.srcInfo.InstanceStartTime)) {
		return newError("checkpoint_commit_failure", "instance_start_time on source database has changed since last checkpoint.", false)
	}
	if !sameInstance(tgtIST, seqString(r.tgtInfo.InstanceStartTime)) {
		return newError("checkpoint_commit_failure", "instance_start_time on target database has changed since last checkpoint.", false)
	}
	stats := r.snapshot()
	if r.opts.BeforeCheckpoint != nil {
		// The runner proves it still owns the job right before the writes
		// (they are fenced too: see Options.Fence).
		if err := r.opts.BeforeCheckpoint(ctx, stats); err != nil {
			if errors.Is(err, ErrSkipCheckpoint) {
				r.log.Debug("checkpoint left out", "seq", string(through), "reason", err.Error())
				return err // neither counted nor a failure of the run (see the defer)
			}
			return err
		}
	}
	body, err := r.writeCheckpoints(ctx, through, stats)
	if err != nil {
		return err
	}
	r.committed = through
	r.lastBody = body
	r.stats.setCheckpointed(through)
	r.log.Debug("checkpoint written", "seq", string(through))
	stats.CheckpointedSourceSeq = through
	if r.opts.OnCheckpoint != nil {
		r.opts.OnCheckpoint(stats)
	}
	if r.opts.OnStats != nil {
		r.opts.OnStats(stats)
	}
	return nil
}

// sameInstance compares instance_start_time values; "0" (or none) on either side matches.
func sameInstance(a, b string) bool {
	return a == b || a == "0" || b == "0" || a == "" || b == ""
}

// checkpointBody is the `_local` checkpoint doc for seq (without _id/_rev).
func (r *run) checkpointBody(seq json.RawMessage, s Stats) []byte {
	now := time.Now().UTC().Format(http.TimeFormat)
	start := r.startTime.UTC().Format(http.TimeFormat)
	entry, _ := json.Marshal(HistoryEntry{
		SessionID: r.sessionID, StartTime: start, EndTime: now,
		StartLastSeq: r.startSeq, EndLastSeq: seq, RecordedSeq: seq,
		MissingChecked: s.RevisionsChecked, MissingFound: s.MissingRevisionsFound,
		DocsRead: s.DocsRead, DocsWritten: s.DocsWritten, DocWriteFailures: s.DocWriteFailures,
		BulkGetDocs: s.BulkGetDocs, BulkGetAttempts: s.BulkGetAttempts,
	})
	hist := append([]json.RawMessage{entry}, r.history...)
	if len(hist) > maxHistory {
		hist = hist[:maxHistory]
	}
	cp := Checkpoint{SessionID: r.sessionID, SourceLastSeq: seq, ReplicationIDVersion: 4, History: hist}
	if r.onTargetAlone() {
		cp.Checkpoint = parse.CheckpointTarget
	}
	if len(r.rep.DocIDs) > 0 {
		cp.StartTime, cp.EndTime = start, now
		cp.DocsRead, cp.DocsWritten, cp.DocWriteFailures = &s.DocsRead, &s.DocsWritten, &s.DocWriteFailures
	}
	b, _ := json.Marshal(&cp)
	return b
}

// resultBody is what a finished one-shot replication answers.
func (r *run) resultBody() json.RawMessage {
	if !r.rep.UseCheckpoints {
		return json.RawMessage(`{"use_checkpoints":false}`)
	}
	r.cpMu.Lock()
	defer r.cpMu.Unlock()
	if r.lastBody != nil {
		return r.lastBody
	}
	body := []byte(`{}`)
	if r.existing != nil {
		body, _ = json.Marshal(r.existing)
	}
	if len(body) > 2 {
		return append(body[:len(body)-1], []byte(`,"no_changes":true}`)...)
	}
	return json.RawMessage(`{"no_changes":true}`)
}
