package jobserver

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// computeRepID is the default replication id function.
func computeRepID(o Options) func(context.Context, *parse.Rep) (parse.RepID, error) {
	return func(ctx context.Context, rep *parse.Rep) (parse.RepID, error) {
		return replicate.ComputeRepID(ctx, rep, o.ServerUUID, o.Pool)
	}
}

// worker runs one accepted job.
type worker struct {
	s          *Server
	job        *jobs.Job
	lease      *jobs.Lease // the node's lease the job was accepted under
	pid        string      // its name in monitoring once its run started (under s.mu)
	started    time.Time
	continuous bool
	key        string // fair-share key

	mu     sync.Mutex
	cancel context.CancelCauseFunc
	cause  error // set by stop before the replication started
	done   atomic.Bool
	// abandoned is set by abandon before the run is cancelled: the run's
	// fence reads it, so no request or body piece leaves after abandon
	// returns, however long the cancellation takes to reach the run.
	abandoned atomic.Bool
	idle      atomic.Bool                            // a continuous run caught up with nothing coming (replicate.Options.OnIdle)
	live      atomic.Pointer[func() replicate.Stats] // the run's current stats (replicate.Options.Live)
	exited    chan struct{}                          // closed when run has returned (final checkpoint written)

	// Slot state (see slots.go), under s.mu: holding a slot since
	// heldSince, asked to hand it on; needSlot, accepted while every slot
	// was held; gate, set while a gated replication runs; quietSince, when
	// it last handed its slot on.
	holding    bool
	heldSince  time.Time
	asked      bool
	needSlot   bool
	gate       *gate
	quietSince time.Time
	holds      uint64 // slots taken so far
	woken      bool   // accepted as woken from parking (see replicate.Options.Woken)

	// rec is the job's record as accepted, or why it did not decode;
	// run takes it.
	rec       *jobdata.Record
	decodeErr error

	// resume is what the run left for the next one (OnResume, before
	// Run returns; kept only if the job is parked).
	resume *replicate.Resume
}

func newWorker(s *Server, job *jobs.Job, lease *jobs.Lease) *worker {
	w := &worker{s: s, job: job, lease: lease, started: s.now(), exited: make(chan struct{})}
	// Decoded once per accept (it unseals the credentials): run takes it.
	w.rec, w.decodeErr = jobdata.Decode(job.Data, s.opts.Keys, job.ID)
	if w.decodeErr == nil {
		w.continuous = w.rec.Continuous()
		w.key = w.rec.ShareKey()
	}
	return w
}

// stop asks the worker to stop for cause (rotation, shutdown, ...).
func (w *worker) stop(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause == nil {
		w.cause = cause
	}
	if w.cancel != nil {
		w.cancel(cause)
	}
}

// abandon stops the worker at once, writing nothing more (no final
// checkpoint, no record): the job may no longer be this node's.
func (w *worker) abandon(why error) {
	w.abandoned.Store(true)
	w.stop(errors.Join(replicate.ErrAbandoned, why))
}

func (w *worker) isDone() bool { return w.done.Load() }

// stopCause returns why the worker was asked to stop, or nil.
func (w *worker) stopCause() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause
}

// filterRecheck is the longest time between two re-checks of a user
// filter's code (CouchDB 3.x re-checks about every minute).
const filterRecheck = time.Minute

// unreadableRetry is how long a job whose record this node cannot open
// (sealed with a key it lacks) waits in the queue before it is offered
// again, to this node or one with the key.
const unreadableRetry = time.Minute

// isUserFilter reports whether a filter is a design doc filter (its code is
// part of the replication id).
func isUserFilter(f string) bool { return f != "" && !strings.HasPrefix(f, "_") }

// run is the life of one job run (CouchDB 4.x couch_replicator_job).
func (w *worker) run() {
	defer close(w.exited)
	defer w.done.Store(true)
	s, cfg := w.s, w.s.config()
	log := s.log.With("job", w.job.ID)
	rec, err := w.rec, w.decodeErr
	w.rec = nil // the run owns it now
	var newer *jobdata.NewerFormatError
	if errors.As(err, &newer) {
		w.leaveNewer(newer.Format)
		return
	}
	if errors.Is(err, seal.ErrUnknownKey) || errors.Is(err, jobdata.ErrNoKeyring) {
		// Sealed with a key this node lacks: a node that has it can run
		// it, so give it back untouched rather than finish it.
		log.Error("job record sealed with a key this node does not hold; giving the job back", "error", err, "key", jobdata.SealKeyID(w.job.Data))
		s.settled("give back unreadable", w.job, s.q.Resubmit(context.Background(), w.job, s.now().Add(unreadableRetry), nil))
		return
	}
	if err != nil || (rec.Rep == nil && rec.State != jobdata.Failed) {
		log.Error("undecodable job data; finishing the job", "error", err)
		s.settled("finish", w.job, s.q.Finish(context.Background(), w.job, nil))
		return
	}
	now := w.s.now()
	if rec.State == jobdata.Failed { // the doc did not parse (it bypassed before_doc_update)
		w.s.counts.failedStarts.Add(1)
		w.fail(rec, rec.ErrorKind, rec.ErrorReason(), now, false)
		return
	}
	if w.needSlot {
		// A stop (shutdown, removal) ends the wait too.
		ctx, cancel := context.WithCancelCause(s.ctx)
		w.mu.Lock()
		w.cancel = cancel
		if w.cause != nil {
			cancel(w.cause)
		}
		w.mu.Unlock()
		tctx, cancelT := context.WithTimeout(ctx, slotWait)
		err := s.acquire(tctx, w)
		cancelT()
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
		cancel(nil)
		if err != nil && w.stopCause() == nil {
			w.requeue(rec, errShutdown) // no slot came free: give the job back
			return
		}
	}
	if cause := w.stopCause(); cause != nil {
		if !errors.Is(cause, errRemoved) && !errors.Is(cause, replicate.ErrAbandoned) {
			w.requeue(rec, cause)
		}
		return
	}
	// 1. Replication id.
	idCtx, cancelID := context.WithTimeout(s.ctx, TypeTimeout/2)
	repID, err := s.opts.RepID(idCtx, rec.Rep)
	cancelID()
	if err != nil {
		if cause := w.stopCause(); cause != nil || s.ctx.Err() != nil {
			w.requeue(rec, errShutdown) // stopped while computing the id: not a crash
			return
		}
		w.s.counts.failedStarts.Add(1)
		w.crash(rec, err, now)
		return
	}
	// 2. Take the replication id and mark the job running, in one transaction.
	pid := s.nextPID()
	dup, err := w.markRunning(rec, repID, pid, now)
	if err != nil {
		if !errors.Is(err, jobs.ErrHalt) {
			log.Warn("could not start job", "error", err)
			w.requeue(rec, err)
		}
		return
	}
	if dup != nil {
		w.s.counts.duplicateAdds.Add(1)
		w.s.counts.failedStarts.Add(1)
		w.duplicate(rec, repID, dup, now)
		return
	}
	s.mu.Lock()
	w.pid = pid
	s.byPID[pid] = w
	s.mu.Unlock()
	log = log.With("rep_id", repID.String())
	log.Info("replication started", "source", rec.Rep.Source.RedactedURL(), "target", rec.Rep.Target.RedactedURL())
	// 3. Run it, pushing stats (the heartbeat) every stats_update_interval.
	w.s.counts.starts.Add(1)
	w.execute(rec, repID, cfg)
}

// dupOwner describes the live job holding a replication id.
type dupOwner struct {
	jobID string
	rec   *jobdata.Record
}

// markRunning implements the ownership check: a replication id free,
// ours, or held by a job that is no longer pending, running or crashing is
// taken; otherwise the owner is returned. A crashing owner keeps its id,
// as in CouchDB 3.x, where a job stays in the scheduler while it backs off
// and a doc of the same replication fails as a duplicate (4.x would let the
// newcomer take over, so the two docs would take turns crashing).
func (w *worker) markRunning(rec *jobdata.Record, repID parse.RepID, pid string, now time.Time) (*dupOwner, error) {
	s, cfg := w.s, w.s.config()
	var dup *dupOwner
	var marked jobdata.Record
	// Bounded by the node's lease: a job that cannot be marked running
	// within it goes back to the queue (run's requeue).
	err := s.batch.do(context.Background(), cfg.NodeLease, w.job, [][]byte{jobstore.RepIDOwnerKey(repID.String())}, func(tx *jobs.Tx) error {
		dup = nil
		owner, err := jobstore.RepIDOwner(tx.KV(), repID.String())
		if err != nil {
			return err
		}
		if owner != "" && owner != w.job.ID {
			o, err := jobstore.Peek(tx, s.opts.Keys, owner)
			switch {
			case err == nil:
				if o.RepID == repID.String() && o.Active() {
					dup = &dupOwner{owner, o}
					return nil
				}
			case !errors.Is(err, jobs.ErrNotFound) && !errors.Is(err, jobstore.ErrUndecodable):
				return err
			}
		}
		next := *rec
		if next.RepID != "" && next.RepID != repID.String() {
			if err := jobstore.ClearRepIDOwner(tx.KV(), next.RepID, w.job.ID); err != nil {
				return err
			}
			next.Stats = jobdata.Stats{}
			next.History = nil
		}
		jobstore.SetRepIDOwner(tx.KV(), repID.String(), w.job.ID)
		next.RepID, next.BaseID = repID.String(), repID.Base
		next.State = jobdata.Running
		next.StateInfo = nil
		next.LastStart, next.LastUpdated, next.StatsUpdated = now.Unix(), now.Unix(), now.Unix()
		next.Node, next.PID = s.opts.Node, pid
		next.History = AppendHistory(next.History, jobdata.Event{Type: jobdata.EventStarted, Timestamp: now.Unix()}, cfg.MaxHistory)
		data := next.Encode(s.opts.Keys, w.job.ID)
		if err := tx.Update(w.job, data); err != nil {
			return err
		}
		marked = next
		return nil
	}, func() {
		if dup == nil {
			*rec = marked
		}
	})
	return dup, err
}

func unix(sec int64) time.Time {
	if sec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}

// duplicate handles a replication id held by another live job: a
// persistent owner makes this job fail with CouchDB's reason; a transient
// owner makes a persistent job crash (retried later) and a transient one fail.
func (w *worker) duplicate(rec *jobdata.Record, repID parse.RepID, dup *dupOwner, now time.Time) {
	if !dup.rec.Transient() {
		reason := "Replication `" + repID.String() + "` specified by document `" + rec.DocID +
			"` already started, triggered by document `" + dup.rec.DocID + "` from db `" + dup.rec.DBName + "`"
		if rec.Transient() {
			reason = "Duplicate job running: " + dup.jobID
		}
		w.fail(rec, "", reason, now, true)
		return
	}
	if rec.Transient() {
		w.fail(rec, "", "Duplicate job running: "+dup.jobID, now, true)
		return
	}
	reason := "Replication `" + repID.String() + "` specified by document `" + rec.DocID +
		"` already running as a transient replication, started via `_replicate` API endpoint"
	w.crash(rec, duplicateError(reason), now)
}

// duplicateError is a run refused because another job holds its
// replication id: the plugin's own reason, which says nothing of the
// endpoints, so the host policy does not hide it.
type duplicateError string

func (e duplicateError) Error() string { return string(e) }

// fail finishes the job in state failed and, for a persistent job, writes
// the failure into its doc. kind is the failure's CouchDB error name, ""
// when it has none.
func (w *worker) fail(rec *jobdata.Record, kind, reason string, now time.Time, countError bool) {
	s := w.s
	if countError {
		rec.ErrorCount++
	}
	rec.State = jobdata.Failed
	rec.StateInfo = jobdata.ErrorInfo(reason)
	rec.LastError, rec.ErrorKind = reason, kind
	rec.LastUpdated = now.Unix()
	rec.PID = ""
	if !s.settled("finish failed", w.job, w.finish(rec)) {
		return // nothing to write into the doc of a job settled elsewhere
	}
	s.log.Info("replication failed", "job", w.job.ID, "reason", reason)
	if !rec.Transient() {
		st, _ := jobstore.TerminalDocState(rec)
		w.writeDoc(rec, st)
	}
}

// finish stores the final record and finishes the job; a finished
// transient job is indexed for removal after transient_job_max_age_sec.
func (w *worker) finish(rec *jobdata.Record) error {
	data := rec.Encode(w.s.opts.Keys, w.job.ID)
	return w.s.q.Transact(context.Background(), func(tx *jobs.Tx) error {
		if err := tx.Finish(w.job, data); err != nil {
			return err
		}
		if rec.Transient() {
			jobstore.SetTransientDone(tx.KV(), w.job.ID, rec.LastUpdated)
		}
		return nil
	})
}

// writeDoc writes a terminal state into the job's doc.
func (w *worker) writeDoc(rec *jobdata.Record, st jobstore.DocState) {
	if w.s.opts.SkipDocStates {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*jobstore.MaxDocUpdateWait)
	defer cancel()
	if err := jobstore.WriteDocState(ctx, w.s.opts.Services, rec.DBName, rec.DocID, st); err != nil {
		w.s.log.Warn("could not write replication state into doc", "db", rec.DBName, "doc_id", rec.DocID, "error", err)
		return
	}
	switch rec.State {
	case jobdata.Completed:
		w.s.counts.completedStateUpdates.Add(1)
	case jobdata.Failed:
		w.s.counts.failedStateUpdates.Add(1)
	}
}

// maxBackoff is the error kind of a run that gave up after its requests
// backed off to the maximum: the next run of a doc job sends fewer
// requests (maxBackoffRep).
const maxBackoff = "max_backoff"

// errorKind returns the CouchDB error name a replication failure carries,
// "" when it carries none.
func errorKind(err error) string {
	var re *replicate.Error
	if errors.As(err, &re) {
		return re.Kind
	}
	return ""
}

// shownFailure is the kind and reason a failed run is recorded with: its
// own, or for a replication the host policy restricts, whatever happened,
// jobdata.UnreachableReason with its kind (the plugin's own duplicate
// reasons excepted, which say nothing of the endpoints). max_backoff
// stays the kind, never shown, as it decides how the job restarts.
func (s *Server) shownFailure(rec *jobdata.Record, err error) (kind, reason string) {
	kind, reason = errorKind(err), err.Error()
	var dup duplicateError
	if s.opts.Pool == nil || errors.As(err, &dup) || !s.opts.Pool.Options().Restricts(rec.Rep) {
		return kind, reason
	}
	if kind != maxBackoff {
		kind = jobdata.UnreachableKind
	}
	return kind, jobdata.UnreachableKind + ": " + jobdata.UnreachableReason
}

// crash records a failed run: transient jobs fail, whatever the reason
// (CouchDB 3.x removes a _replicate job that crashes, max_backoff
// included: it is shown nowhere after); others become crashing and are
// re-enqueued after the exponential backoff penalty.
func (w *worker) crash(rec *jobdata.Record, err error, now time.Time) {
	s, cfg := w.s, w.s.config()
	kind, reason := s.shownFailure(rec, err)
	s.counts.crashes.Add(1)
	if reason != err.Error() {
		s.log.Info("replication failed; its creator sees the host policy's one reason", "job", w.job.ID, "reason", err.Error())
	}
	if rec.Transient() {
		w.fail(rec, kind, reason, now, true)
		return
	}
	rec.ErrorCount = Heal(rec.ErrorCount, unix(rec.LastStart), now, cfg.HealthThreshold) + 1
	rec.State = jobdata.Crashing
	rec.LastError, rec.ErrorKind = reason, kind
	rec.StateInfo = jobdata.ErrorInfo(reason)
	rec.LastUpdated = now.Unix()
	rec.PID = ""
	ev := jobdata.EventCrashed
	if kind == replicate.ErrStalled {
		ev = jobdata.EventStalled
	}
	rec.History = AppendHistory(rec.History, jobdata.Event{Type: ev, Timestamp: now.Unix(), Reason: reason}, cfg.MaxHistory)
	wait := Backoff(rec.ErrorCount, cfg, nil)
	err = s.q.Resubmit(context.Background(), w.job, now.Add(wait), rec.Encode(w.s.opts.Keys, w.job.ID))
	if s.settled("re-enqueue crashed", w.job, err) {
		s.log.Info("replication crashed", "job", w.job.ID, "reason", reason, "error_count", rec.ErrorCount, "retry_in", wait.String())
	}
}

// requeue puts a stopped job back in the queue as pending: at once after a
// shutdown or id change, one interval later after rotation.
func (w *worker) requeue(rec *jobdata.Record, cause error) {
	s, cfg := w.s, w.s.config()
	now := w.s.now()
	var at time.Time
	if errors.Is(cause, errRotated) {
		at = now.Add(cfg.Interval)
	}
	if rec.State == jobdata.Running {
		w.s.counts.stops.Add(1)
		rec.State = jobdata.Pending
		rec.LastUpdated = now.Unix()
		ev := jobdata.Event{Type: jobdata.EventStopped, Timestamp: now.Unix()}
		if errors.Is(cause, errRepIDChanged) {
			ev.Reason = cause.Error()
		}
		rec.History = AppendHistory(rec.History, ev, cfg.MaxHistory)
	}
	rec.PID = ""
	if w.handsOver() {
		return
	}
	s.settled("re-enqueue stopped", w.job, s.q.Resubmit(context.Background(), w.job, at, rec.Encode(w.s.opts.Keys, w.job.ID)))
}

// handsOver reports whether a run stopped by the server's Stop leaves its
// job held under the node's lease rather than re-enqueuing it on its own:
// Stop hands the lease over once every run has written its final
// checkpoint, and other nodes take its jobs as they stand, many per
// transaction (jobs.Lease.HandOver, AcceptMany), instead of one
// re-enqueue and one accept per job.
func (w *worker) handsOver() bool {
	w.s.mu.Lock()
	stopping := w.s.stopping
	w.s.mu.Unlock()
	return stopping && errors.Is(w.stopCause(), errShutdown) && w.lease != nil && w.lease.Valid() == nil
}

// park puts a caught-up continuous job back in the queue as parked: never
// due, until the Parker sees its source change after the checkpointed seq
// and re-enqueues it. A job with no checkpointed seq is re-enqueued instead.
func (w *worker) park(rec *jobdata.Record, cause error) {
	s, cfg := w.s, w.s.config()
	seq := rec.Stats.CheckpointedSourceSeq
	if len(seq) == 0 || s.opts.Parker == nil {
		w.requeue(rec, errShutdown)
		return
	}
	now := w.s.now()
	w.s.counts.stops.Add(1)
	w.s.counts.parks.Add(1)
	rec.State = jobdata.Pending
	rec.LastUpdated = now.Unix()
	rec.PID = ""
	rec.Parked = &jobdata.Parked{Since: now.Unix(), Seq: seq}
	reason := "idle"
	if errors.Is(cause, errPark) {
		reason = "idle; slot given to a pending job"
	}
	rec.History = AppendHistory(rec.History, jobdata.Event{Type: jobdata.EventStopped, Timestamp: now.Unix(), Reason: reason}, cfg.MaxHistory)
	if s.settled("park", w.job, s.q.Resubmit(context.Background(), w.job, jobstore.ParkedTime(), rec.Encode(w.s.opts.Keys, w.job.ID))) {
		s.log.Debug("replication parked", "job", w.job.ID, "seq", string(seq))
		if w.resume != nil {
			s.resumes.put(w.job.ID, w.resume)
		}
		s.opts.Parker.Parked(w.job.ID, rec)
	}
}

// maxBackoffRep lowers a replication's settings after a max_backoff crash,
// as CouchDB does, so it sends fewer requests.
func maxBackoffRep(rec *jobdata.Record) *parse.Rep {
	rep := rec.Rep
	if rec.ErrorKind != maxBackoff {
		return rep
	}
	c := rep.Clone()
	c.CheckpointInterval = min(c.CheckpointInterval, 5000)
	c.WorkerProcesses = min(c.WorkerProcesses, 2)
	c.WorkerBatchSize = min(c.WorkerBatchSize, 100)
	c.HTTPConnections = min(c.HTTPConnections, 2)
	return c
}

// execute runs the job's replication to its end and settles the job: the
// run in its own goroutine, while this one records its progress, re-checks
// a user filter and, when the run ends, settles the job's record.
func (w *worker) execute(rec *jobdata.Record, repID parse.RepID, cfg Config) {
	s := w.s
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	w.mu.Lock()
	w.cancel = cancel
	if w.cause != nil {
		cancel(w.cause)
	}
	w.mu.Unlock()

	var idleAfter time.Duration
	var slot replicate.Slot
	if g := s.newGate(w, rec.Rep, cfg); g != nil {
		idleAfter = cfg.IdlePark
		defer g.watch.Close()
		s.mu.Lock()
		s.setGateLocked(w, g)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.setGateLocked(w, nil)
			s.mu.Unlock()
		}()
		slot = g
		s.spawnAcceptors(0) // its slot may be handed on: acceptors may wait for jobs
	}
	var resume *replicate.Resume
	if idleAfter > 0 {
		resume = s.resumes.take(w.job.ID, rec.Stats.CheckpointedSourceSeq)
	}
	p := &progress{w: w, rec: rec, cfg: cfg, latest: rec.Stats}
	started := make(chan struct{}, 1)
	checkpoints := make(chan struct{}, 1)
	opts := w.runOptions(repID, cfg, p, started, checkpoints)
	opts.Resume, opts.IdleAfter, opts.Slot = resume, idleAfter, slot
	type outcome struct {
		res *replicate.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := replicate.Run(ctx, maxBackoffRep(rec), opts)
		done <- outcome{res, err}
	}()
	// The node's lease keeps the job ours (see lease.go); the record is
	// written when there is progress to record: before each checkpoint,
	// which is written only once that write has proved the job still ours,
	// and every stats_update_interval while the stats change.
	tick := time.NewTicker(cfg.StatsUpdate)
	defer tick.Stop()
	filter := &filterCheck{w: w, rep: rec.Rep, repID: repID, cancel: cancel, last: s.now()}
	abandoned := func() bool { return errors.Is(context.Cause(ctx), replicate.ErrAbandoned) }
	for {
		select {
		case <-tick.C:
			if abandoned() {
				continue
			}
			p.push(ctx)
			filter.tick(ctx)
		case <-started:
			if live := w.live.Load(); live != nil && !abandoned() {
				p.set((*live)())
				p.push(ctx)
			}
		case <-checkpoints:
			if abandoned() {
				continue
			}
			p.checkpointed()
			filter.afterCheckpoint(ctx)
		case out := <-done:
			if abandoned() || w.lease.Valid() != nil {
				return // the job is gone or may be someone else's: leave its record alone
			}
			rec.Stats = p.final()
			w.settle(rec, ctx, out.res, out.err)
			return
		}
	}
}

// runOptions are the options of the job's replication, but for how it
// resumes and parks (execute's): its reports go to p, a start to started
// and each checkpoint to checkpoints.
func (w *worker) runOptions(repID parse.RepID, cfg Config, p *progress, started, checkpoints chan<- struct{}) replicate.Options {
	s := w.s
	id := repID
	// max_document_id_length and missing_doc_retry_msec are read when the
	// job starts, from the [replicator] config the pool was last given.
	var maxIDLen int
	var missingRetry time.Duration
	if s.opts.Pool != nil {
		po := s.opts.Pool.Options()
		maxIDLen = po.MaxDocumentIDLength
		missingRetry = time.Duration(po.MissingDocRetry()) * time.Millisecond
	}
	signal := func(c chan<- struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	return replicate.Options{
		Woken:               w.woken,
		OnResume:            func(h *replicate.Resume) { w.resume = h },
		Logger:              s.log.Named("replicate").With("job", w.job.ID, "rep_id", repID.String()),
		Pool:                s.opts.Pool,
		Group:               s.opts.Group,
		ServerUUID:          s.opts.ServerUUID,
		RepID:               &id,
		StartStats:          replicate.Stats(p.rec.Stats),
		MaxDocumentIDLength: maxIDLen,
		MissingDocRetry:     missingRetry,
		StallTimeout:        cfg.StallTimeout,
		Fence:               w.fence(),
		OnIdle:              w.idle.Store,
		Live:                func(get func() replicate.Stats) { w.live.Store(&get) },
		// Where it starts is recorded at once, for other nodes' monitoring.
		OnStart:          func(replicate.Stats) { signal(started) },
		BeforeCheckpoint: w.beforeCheckpoint(p),
		OnStats:          p.set,
		OnCheckpoint: func(st replicate.Stats) {
			p.set(st)
			signal(checkpoints)
		},
	}
}

// gone reports whether job id surely no longer exists in the queue.
func (s *Server) gone(ctx context.Context, id string) bool {
	_, err := s.q.GetState(ctx, jobdata.JobType, id)
	return errors.Is(err, jobs.ErrNotFound)
}

// record writes the job's record with stats st (callers hold the run's
// stats lock, which guards rec), proving the job is still
// this worker's (the update compares its lock, in the same transaction).
// A job no longer ours abandons the run; other errors (the queue
// unreachable) are returned, to be retried at the next chance.
func (w *worker) record(ctx context.Context, rec *jobdata.Record, st jobdata.Stats, cfg Config) error {
	s := w.s
	if err := w.lease.Valid(); err != nil {
		w.abandon(errLeaseLost)
		return err
	}
	next := *rec
	next.Stats = st
	now := w.s.now()
	next.StatsUpdated = now.Unix()
	if next.ErrorCount > 0 && Heal(next.ErrorCount, unix(next.LastStart), now, cfg.HealthThreshold) == 0 {
		next.ErrorCount, next.LastError, next.ErrorKind = 0, "", ""
	}
	data := next.Encode(s.opts.Keys, w.job.ID)
	err := s.batch.do(context.WithoutCancel(ctx), cfg.NodeLease/4, w.job, nil, func(tx *jobs.Tx) error { return tx.Update(w.job, data) }, func() {})
	switch {
	case err == nil:
		*rec = next
		return nil
	case errors.Is(err, jobs.ErrHalt) && errors.Is(w.stopCause(), errRemoved):
		// Stopping because its job was removed: beforeCheckpoint decides
		// whether the final checkpoint may still be written (the job is
		// gone for good) or not (abandoned, or added again since).
	case errors.Is(err, jobs.ErrHalt):
		s.log.Info("job no longer this worker's (removed, or taken over); stopping it without a final checkpoint", "job", w.job.ID)
		w.abandon(errLockLost)
	default:
		s.log.Warn("could not record a job's progress; retrying later", "job", w.job.ID, "error", err)
	}
	return err
}

// beforeCheckpoint is the run's replicate.Options.BeforeCheckpoint: the
// checkpoint is written only once the job's record, with the stats the
// checkpoint records, was written under its lock.
func (w *worker) beforeCheckpoint(p *progress) func(context.Context, replicate.Stats) error {
	return func(ctx context.Context, st replicate.Stats) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if w.lease != nil && w.lease.Strained() && w.stopCause() == nil {
			// A periodic checkpoint can wait for the next interval; the
			// node's lease renewals cannot (see progress.push). A run
			// that stops still writes its last one.
			return errors.Join(replicate.ErrSkipCheckpoint, errLeaseStrained)
		}
		err := w.record(ctx, p.rec, jobdata.Stats(st), p.cfg)
		if errors.Is(err, jobs.ErrHalt) && errors.Is(w.stopCause(), errRemoved) && w.lease.Valid() == nil && w.s.gone(ctx, w.job.ID) {
			// Removed (a deleted doc) and not re-created: nobody else
			// can run it, so the final checkpoint keeps the work done.
			return nil
		}
		if err != nil {
			return errors.Join(replicate.ErrSkipCheckpoint, err)
		}
		return w.lease.Valid() // the write that proved it took time
	}
}

// statsEqual reports whether two stats record the same progress.
func statsEqual(a, b jobdata.Stats) bool {
	return a.RevisionsChecked == b.RevisionsChecked && a.MissingRevisionsFound == b.MissingRevisionsFound &&
		a.DocsRead == b.DocsRead && a.DocsWritten == b.DocsWritten && a.DocWriteFailures == b.DocWriteFailures &&
		a.BulkGetDocs == b.BulkGetDocs && a.BulkGetAttempts == b.BulkGetAttempts &&
		bytes.Equal(a.CheckpointedSourceSeq, b.CheckpointedSourceSeq) && bytes.Equal(a.SourceSeq, b.SourceSeq) &&
		bytes.Equal(a.ThroughSeq, b.ThroughSeq) && pendingEqual(a.ChangesPending, b.ChangesPending)
}

func pendingEqual(a, b *int64) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// settle records how a run ended.
func (w *worker) settle(rec *jobdata.Record, ctx context.Context, res *replicate.Result, err error) {
	s := w.s
	now := w.s.now()
	cause := context.Cause(ctx)
	switch {
	case errors.Is(err, replicate.ErrIdle) || errors.Is(cause, errPark) && errors.Is(err, replicate.ErrStopped):
		w.park(rec, cause)
	case err == nil && res != nil:
		rec.Stats = jobdata.Stats(res.Stats)
		rec.State = jobdata.Completed
		rec.StateInfo = nil
		rec.CheckpointHistory = res.Body
		rec.LastUpdated = now.Unix()
		rec.PID = ""
		rec.ErrorCount = 0
		if !s.settled("finish completed", w.job, w.finish(rec)) {
			return
		}
		s.log.Info("replication completed", "job", w.job.ID, "docs_written", rec.Stats.DocsWritten)
		if !rec.Transient() {
			st, _ := jobstore.TerminalDocState(rec)
			w.writeDoc(rec, st)
		}
	case cause != nil && (errors.Is(err, replicate.ErrStopped) || ctx.Err() != nil):
		w.requeue(rec, cause)
	case err == nil:
		w.crash(rec, errors.New("replication ended without a result"), now)
	default:
		w.crash(rec, err, now)
	}
}
