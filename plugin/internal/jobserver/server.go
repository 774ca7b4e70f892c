package jobserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/replicate"
	"github.com/hashicorp/go-hclog"
)

// TypeTimeout is the activity timeout of `rep_jobs`: a running job not
// updated for this long is re-enqueued by the queue's monitor.
const TypeTimeout = 61 * time.Second

// Why a worker's replication was cancelled.
var (
	errRotated      = errors.New("stopped to let a pending job run")
	errShutdown     = errors.New("job server stopping")
	errRepIDChanged = errors.New("replication id changed")
	errLockLost     = errors.New("job lock lost")
	errRemoved      = errors.New("job removed")
	errPark         = errors.New("idle; parked to free its slot")
)

// shutdownGrace bounds how long Stop waits for running jobs to checkpoint.
const shutdownGrace = 10 * time.Second

// Options configure a Server.
type Options struct {
	Queue *jobs.Queue
	// Keys opens and seals the credentials of the jobs' records.
	Keys     *seal.Keyring
	Services hooks.Services
	Logger   hclog.Logger
	Pool     *couchclient.Pool
	// Group is the replicate.Group of the server's runs: they share their
	// reads of common sources and sum their counters in it (nil: the
	// server makes one of its own).
	Group *replicate.Group
	// ServerUUID and Node come from the server's info (rep ids, monitoring).
	ServerUUID, Node string
	// RepID computes a replication id; nil = replicate.ComputeRepID.
	RepID func(ctx context.Context, rep *parse.Rep) (parse.RepID, error)
	// Parker, when set, parks continuous jobs that caught up and idled
	// for idle_park_sec (and quiet ones beyond max_jobs) and wakes them
	// when their source changes; its watches let jobs hand their slots
	// on and wait for a change without a feed (see slots.go). nil: jobs
	// never park.
	Parker Parker
	// SkipDocStates leaves terminal states out of replication docs: on a
	// node sharing the queue with others, the doc may live on another
	// server, whose api_frontend writes them (frontend.WriteDocStates).
	SkipDocStates bool
	// Replaces, when set, names the leases of processes known dead (this
	// node's previous plugin process): their jobs are re-enqueued as soon
	// as this server holds its lease (jobs.LeaseOptions.Replaces).
	Replaces func(jobs.LeaseInfo) bool
	// Now is the clock of scheduling decisions (run times, backoff,
	// rotation, the age of finished jobs); nil = time.Now. Waits and
	// the node's lease use the monotonic clock whatever it is.
	Now func() time.Time
}

// now is the server's clock (Options.Now).
func (s *Server) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// Parker parks jobs and wakes them when their source changes (package
// park's Waker).
type Parker interface {
	// Watchable reports whether a job reading ep can be woken when ep changes.
	Watchable(ep parse.Endpoint) bool
	// Parked registers a job just parked in the queue as rec.
	Parked(jobID string, rec *jobdata.Record)
	// Watch follows the changes of ep's source for a quiet job; nil
	// when ep cannot be watched.
	Watch(ep parse.Endpoint, rep *parse.Rep) SourceWatch
}

// Server is the job server of one replication node.
type Server struct {
	opts Options
	q    *jobs.Queue
	recs jobstore.Records
	log  hclog.Logger
	cfg  atomic.Pointer[Config]
	pids atomic.Int64
	// memCheck is set while a returnMemory check is pending.
	memCheck atomic.Bool
	counts   counters // see Stats
	stranded stranded // jobs of a newer format no live node runs (newer.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	workers   map[string]*worker
	byPID     map[string]*worker // the workers that started their run, by the pid their record shows
	active    int                // workers holding a slot (at most max_jobs)
	heldByKey map[string]int     // of those, per fair-share key (what Choose counts)
	waiters   []*slotWaiter
	asked     int // holders asked for their slot (see slots.go)
	reserved  int // free slots acceptors reserved for the jobs they are taking
	acceptors int
	churn     int
	lowered   bool // max_jobs was lowered since the last cycle
	stopping  bool
	share     *Share
	lastCycle time.Time
	// holders are the workers that took a slot, in the order they took
	// it (see nextAskableLocked); entries go stale as slots are released.
	holders []holder

	resumes resumes // hints for the next runs of the jobs parked here

	// batch commits the workers' writes made at the same time together
	// (see batch.go).
	batch batcher

	// lease is the node's hold on the queue (nil while it has none);
	// leased is closed once it has one (see lease.go).
	lease  *jobs.Lease
	leased chan struct{}

	// newInterval tells the scheduling loop that interval_sec changed.
	newInterval chan struct{}
	// orphans are the jobs held under the lease that the last cycle found
	// without a worker (see releaseOrphans).
	orphans map[string]bool
}

// New returns a job server; Start runs it.
func New(opts Options, cfg Config) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.RepID == nil {
		opts.RepID = computeRepID(opts)
	}
	if opts.Group == nil {
		opts.Group = new(replicate.Group)
	}
	s := &Server{
		opts:      opts,
		q:         opts.Queue,
		recs:      jobstore.Records{Q: opts.Queue, Keys: opts.Keys},
		log:       opts.Logger.Named("jobserver"),
		workers:   map[string]*worker{},
		byPID:     map[string]*worker{},
		heldByKey: map[string]int{},
		share:     NewShare(),
		leased:    make(chan struct{}),

		newInterval: make(chan struct{}, 1),
	}
	s.batch = batcher{q: opts.Queue, timeout: func() time.Duration { return s.config().NodeLease / 4 }}
	s.cfg.Store(&cfg)
	return s
}

// SetConfig changes the settings at runtime; they apply from the next
// acceptor decision and scheduling cycle.
func (s *Server) SetConfig(cfg Config) {
	old := s.cfg.Swap(&cfg)
	if cfg.Interval != old.Interval {
		select {
		case s.newInterval <- struct{}{}:
		default:
		}
	}
	if cfg.ActivityTimeout != old.ActivityTimeout && s.ctx != nil {
		if err := s.q.SetTypeTimeout(s.ctx, jobdata.JobType, cfg.ActivityTimeout); err != nil {
			s.log.Warn("could not change the activity timeout", "error", err)
		}
	}
	s.mu.Lock()
	if cfg.MaxJobs < old.MaxJobs {
		s.lowered = true
	}
	s.grantLocked() // slots added for waiting jobs
	s.mu.Unlock()
	s.spawnAcceptors(0)
}

func (s *Server) config() Config { return *s.cfg.Load() }

// Start sets the type timeout, re-enqueues jobs left running by a dead
// process when reclaim is set (single-owner stores only), and starts the
// acceptors and the scheduling cycle.
func (s *Server) Start(ctx context.Context, reclaim bool) error {
	if err := s.q.SetTypeTimeout(ctx, jobdata.JobType, s.config().ActivityTimeout); err != nil {
		return err
	}
	if reclaim {
		if err := s.reclaim(ctx); err != nil {
			return err
		}
	}
	// Jobs enqueued by a process that did not index them by fair-share key.
	if n, err := s.q.IndexPending(ctx, jobdata.JobType); err != nil {
		return err
	} else if n > 0 {
		s.log.Info("indexed pending jobs by fair-share key", "jobs", n)
	}
	// The first lease is granted now: a node whose name another live
	// process holds refuses to start. Other failures are retried.
	first, err := s.grantOnce(ctx)
	if errors.Is(err, jobs.ErrNodeInUse) {
		return err
	}
	if err != nil {
		s.log.Warn("could not take a lease on the job queue; retrying", "error", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.lastCycle = s.now()
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.loop()
	}()
	go func() {
		defer s.wg.Done()
		s.holdLease(first)
	}()
	s.spawnAcceptors(0)
	return nil
}

// reclaim re-enqueues jobs that are running in the store although no
// process runs them (the previous owner of the store died): they resume at
// once instead of after the activity timeout.
func (s *Server) reclaim(ctx context.Context) error {
	var ids []string
	err := s.q.Fold(ctx, jobdata.JobType, func(id string, st jobs.State, _ []byte) error {
		if st == jobs.Running {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	now := s.now()
	for _, id := range ids {
		err := s.q.Transact(ctx, func(tx *jobs.Tx) error {
			data, err := tx.GetData(jobdata.JobType, id)
			if err != nil {
				return err
			}
			// A record that does not decode (an older or newer version's,
			// or damaged) is re-enqueued as it is: its worker finishes it,
			// and it does not keep the server, and every other job, from
			// starting.
			if rec, err := jobdata.Decode(data, s.opts.Keys, id); err == nil {
				if rec.State == jobdata.Running {
					rec.State = jobdata.Pending
					rec.LastUpdated = now.Unix()
					rec.History = AppendHistory(rec.History, jobdata.Event{Type: jobdata.EventStopped, Timestamp: now.Unix(), Reason: "node restarted"}, s.config().MaxHistory)
					rec.PID = ""
				}
				data = rec.Encode(s.opts.Keys, id)
			}
			if err := tx.Remove(jobdata.JobType, id); err != nil {
				return err
			}
			return tx.Add(jobdata.JobType, id, data, time.Time{})
		})
		if err != nil && !errors.Is(err, jobs.ErrNotFound) {
			return err
		}
	}
	if len(ids) > 0 {
		s.log.Info("re-enqueued jobs left running by a previous process", "jobs", len(ids))
	}
	return nil
}

// Stop checkpoints every running job (each replication writes a final
// checkpoint), stops the acceptors and hands the jobs over to other nodes
// (handOverLease). Jobs whose worker does not finish in time are
// abandoned (they write nothing more) and handed over too.
func (s *Server) Stop(ctx context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.mu.Lock()
	s.stopping = true
	ws := make([]*worker, 0, len(s.workers))
	for _, w := range s.workers {
		w.stop(errShutdown)
		ws = append(ws, w)
	}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	wait := shutdownGrace
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-500*time.Millisecond)
	}
	select {
	case <-done:
		s.handOverLease(ctx)
		s.log.Info("job server stopped", "jobs_stopped", len(ws))
		return nil
	case <-time.After(max(wait, 0)):
	}
	forced := 0
	for _, w := range ws {
		if !w.isDone() {
			w.abandon(errShutdown) // writes nothing more, so its job can move on
			forced++
		}
	}
	s.handOverLease(ctx) // others take the jobs of those workers as they stand
	s.log.Warn("job server stop timed out; handed unfinished jobs over without a final checkpoint", "jobs", forced)
	return nil
}

// loop runs the scheduling cycle every interval (+ up to a third of jitter).
func (s *Server) loop() {
	for {
		iv := s.config().Interval
		t := time.NewTimer(iv + rand.N(iv/3+1))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.newInterval:
			t.Stop() // a new interval_sec: wait that long from now instead
			continue
		case <-t.C:
		}
		s.Cycle(s.ctx)
	}
}

// Cycle is one scheduling step (CouchDB 4.x job server): fair-share
// accounting, trim excess continuous jobs, start extra acceptors so up to
// max_churn pending jobs rotate in, drop old finished transient jobs.
func (s *Server) Cycle(ctx context.Context) {
	cfg := s.config()
	now := s.now()
	s.mu.Lock()
	var running []ShareJob
	var list []Worker
	// Only the workers holding a slot run: quiet ones neither use their
	// share nor count toward max_jobs.
	count := s.heldByKey
	for id, w := range s.workers {
		if w.holding {
			ran := now.Sub(later(w.started, s.lastCycle))
			running = append(running, ShareJob{ID: id, Key: w.key, Ran: ran})
		}
	}
	s.share.Cycle(running, max(now.Sub(s.lastCycle), time.Millisecond), cfg)
	s.lastCycle = now
	for id, w := range s.workers {
		if w.holding {
			list = append(list, Worker{ID: id, Continuous: w.continuous, Started: w.started, Priority: s.share.Priority(id, w.key, count[w.key], cfg)})
		}
	}
	stop := Trim(list, cfg.MaxJobs, cfg.MinRunTime, now, s.lowered)
	s.lowered = false
	for _, id := range stop {
		s.workers[id].stop(errRotated)
	}
	s.churn += len(stop)
	// Jobs handed on (handOn) finish their batches in flight, checkpoint,
	// and are re-enqueued for the others.
	shed := s.shedLocked()
	for _, w := range shed {
		w.stop(errRebalanced)
	}
	if len(shed) > 0 {
		s.log.Info("handing jobs on to less loaded nodes", "jobs", len(shed))
	}
	slots := ChurnSlots(cfg.MaxJobs, cfg.MaxChurn, s.churn, s.acceptors, s.active-len(stop))
	acceptors, workers, churn := s.acceptors, s.active-len(stop), s.churn
	s.mu.Unlock()
	if slots > 0 {
		pending, err := s.q.PendingCount(ctx, jobdata.JobType, time.Time{}, slots)
		if err != nil {
			s.log.Warn("pending count failed", "error", err)
		}
		if extra := ExtraAcceptors(cfg.MaxJobs, cfg.MaxChurn, churn, acceptors, workers, pending); extra > 0 {
			s.spawnAcceptors(extra)
		}
	}
	s.dropOldTransient(ctx, cfg, now)
	s.releaseOrphans(ctx)
	s.mu.Lock()
	s.churn = 0
	s.mu.Unlock()
	s.publishLoad()
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dropOldTransient removes finished transient jobs older than
// transient_job_max_age_sec (found through their finish-time index).
func (s *Server) dropOldTransient(ctx context.Context, cfg Config, now time.Time) {
	var old []string
	err := s.q.Transact(ctx, func(tx *jobs.Tx) error {
		old = old[:0]
		done, err := jobstore.FinishedTransient(tx.KV())
		for id, at := range done {
			if now.Sub(time.Unix(at, 0)) >= cfg.TransientMaxAge {
				old = append(old, id)
			}
		}
		return err
	})
	if err != nil {
		s.log.Warn("could not list finished transient jobs", "error", err)
	}
	for _, id := range old {
		err := s.q.Transact(ctx, func(tx *jobs.Tx) error {
			err := jobstore.Remove(tx, id)
			return err
		})
		if err != nil {
			s.log.Warn("could not remove old transient job", "job", id, "error", err)
		}
	}
}

// spawnAcceptors starts acceptors up to WantAcceptors, plus extra ones for rotation.
func (s *Server) spawnAcceptors(extra int) {
	cfg := s.config()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || s.ctx == nil {
		return
	}
	n := max(WantAcceptors(cfg.MaxJobs, cfg.MaxAcceptors, s.busy())-s.acceptors, 0)
	for i := 0; i < n+extra; i++ {
		s.acceptors++
		s.wg.Add(1)
		rotating := i >= n
		go func() {
			defer s.wg.Done()
			s.accept(rotating)
		}()
	}
}

// accept waits for a due job and turns into its worker. An acceptor no
// longer needed (more acceptors than wanted) leaves after a wait of
// startup_jitter without a job. Only a rotating acceptor (started by the
// interval step to replace a running job) may take a job beyond max_jobs;
// any other gives it back, so a max_jobs lowered while it waited holds.
func (s *Server) accept(rotating bool) {
	leave := func() {
		s.mu.Lock()
		s.acceptors--
		s.mu.Unlock()
	}
	for {
		cfg := s.config()
		wait := 5*time.Second + rand.N(cfg.StartupJitter+1)
		actx, cancel := context.WithTimeout(s.ctx, wait)
		lease := s.currentLease(actx)
		if lease == nil {
			cancel()
			if s.ctx.Err() != nil {
				leave()
				return
			}
			continue
		}
		s.awaitRenewal(actx, lease)
		s.awaitBalance(actx)
		if s.adopt(actx, lease, rotating, cfg) {
			cancel()
			return
		}
		want, held := s.reserve(rotating, lease, cfg)
		woken := map[string]bool{}
		got, err := s.q.AcceptMany(actx, jobdata.JobType, want, jobs.AcceptOptions{Lease: lease, ChooseMany: func(c, taken []jobs.Candidate) int {
			if len(taken) == 0 {
				clear(woken) // a retried transaction
			}
			i := s.chooseNext(c, taken)
			if i >= 0 && i < len(c) && c[i].STime.Before(jobstore.AddedTime()) {
				woken[c[i].ID] = true
			}
			return i
		}})
		cancel()
		if s.ctx.Err() != nil || errors.Is(err, jobs.ErrClosed) {
			s.unreserve(held)
			for _, job := range got {
				s.settled("give back accepted", job, s.q.Resubmit(context.Background(), job, time.Time{}, nil))
			}
			leave()
			return
		}
		if err != nil {
			s.unreserve(held)
			s.mu.Lock()
			surplus := s.acceptors > WantAcceptors(cfg.MaxJobs, cfg.MaxAcceptors, s.busy())
			if surplus {
				s.acceptors--
			}
			s.mu.Unlock()
			if surplus {
				return
			}
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jobs.ErrLeaseLost) {
				s.log.Warn("accept failed", "error", err)
				select {
				case <-s.ctx.Done():
				case <-time.After(rand.N(cfg.StartupJitter + time.Millisecond)):
				}
			}
			continue
		}
		s.mu.Lock()
		s.acceptors += len(got) - 1 // start ends one acceptor per job
		s.mu.Unlock()
		for _, job := range got {
			s.start(newWorker(s, job, lease), rotating, woken[job.ID], cfg)
			if held > 0 { // its slot is held now
				s.unreserve(1)
				held--
			}
		}
		s.unreserve(held)
		return
	}
}

// reserve is how many jobs an acceptor takes at once: as many as there
// are free slots not reserved by other acceptors (at most
// jobs.MaxAcceptBatch, and no more than this node's fair share of the
// cluster's jobs while another node has room: see balance.go), which it
// reserves until its jobs hold them (unreserve); one for a rotating
// acceptor, or when no slot is free (start gives that one back, as
// before). So the jobs a stopped node released, or a burst of new docs,
// start many per queue transaction. held is how many it reserved.
func (s *Server) reserve(rotating bool, lease *jobs.Lease, cfg Config) (want, held int) {
	if rotating {
		return 1, 0
	}
	bound := takeBoundSeen(lease.ID(), s.activeNow(), s.q.Leases())
	s.mu.Lock()
	defer s.mu.Unlock()
	free := cfg.MaxJobs - s.active - s.reserved
	if free <= 1 {
		return 1, 0 // not reserved: start decides
	}
	want = min(free, jobs.MaxAcceptBatch, max(bound, 1))
	s.reserved += want
	return want, want
}

// unreserve gives back n of the slots reserve took.
func (s *Server) unreserve(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.reserved = max(s.reserved-n, 0)
	s.mu.Unlock()
}

// activeNow is the number of slots held.
func (s *Server) activeNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// adopt is an acceptor's first look: it takes, many per transaction, the
// jobs a dead node's expired lease still holds, as they stand, up to the
// free slots (jobs.Queue.Adopt), and runs them, so a failover moves its
// jobs in a few transactions instead of a re-enqueue and an accept each.
// It reports whether it took any (the acceptor then ends, as after an
// accept).
func (s *Server) adopt(ctx context.Context, lease *jobs.Lease, rotating bool, cfg Config) bool {
	s.mu.Lock()
	free := cfg.MaxJobs - s.active
	s.mu.Unlock()
	if free <= 0 || rotating {
		return false
	}
	got, err := s.q.Adopt(ctx, jobdata.JobType, free, lease)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, jobs.ErrLeaseLost) {
			s.log.Debug("could not adopt the jobs of expired leases", "error", err)
		}
		return false
	}
	if len(got) == 0 {
		return false
	}
	s.mu.Lock()
	s.acceptors += len(got) - 1 // start ends one acceptor per job
	s.mu.Unlock()
	for _, job := range got {
		s.start(newWorker(s, job, lease), false, false, cfg)
	}
	if len(got) == jobs.MaxAcceptBatch {
		s.spawnAcceptorsUpTo(adoptAcceptors) // there may be many more: take them side by side
	}
	return true
}

// adoptAcceptors bounds the acceptors a full adoption brings up. A node
// that stops (or dies) leaves all its jobs under its lease; two acceptors
// (max_acceptors) took them 30 a transaction, one after the other, about
// 100 jobs a second on a loaded etcd (a handover of 1,000 jobs took
// 10 s). Each adoption reads the lease's jobs from a random place, so
// acceptors side by side rarely want the same; those without a job leave
// after their wait, as any acceptor beyond max_acceptors does.
const adoptAcceptors = 8

// start is the end of an acceptor that took w's job: it runs w, or gives
// the job back when there is no room for it (every slot held and the
// acceptor not a rotating one, or the server stopping).
func (s *Server) start(w *worker, rotating, woken bool, cfg Config) {
	job := w.job
	s.mu.Lock()
	s.acceptors--
	// Workers asked to stop still count until they have exited: they
	// may still be writing.
	full := s.active >= s.config().MaxJobs
	var rotated *worker
	if full && rotating && !s.stopping && s.live() >= s.config().MaxJobs {
		// Rotation stops a running job before the new one starts, as
		// CouchDB does, so max_jobs is never exceeded.
		if rotated = s.rotationVictim(cfg, s.now()); rotated != nil {
			rotated.stop(errRotated)
			s.churn++ // one rotation: this stop and the start below
		}
	}
	// With every slot held, the job waits for one if a gated job
	// holds one: asked for it, that one hands it on after a round.
	waitSlot := full && rotated == nil && !s.stopping && s.anyGatedLocked()
	if s.stopping || full && rotated == nil && !waitSlot {
		s.mu.Unlock()
		s.settled("give back accepted", job, s.q.Resubmit(context.Background(), job, time.Time{}, nil))
		return
	}
	// Only rotations count toward max_churn: a job taking a free slot
	// (a new one, or one a stopped job left) starts at once, as
	// CouchDB starts a new job when there is room, so a first rotation
	// is not held back a whole interval by the jobs that filled the
	// slots.
	w.needSlot = waitSlot
	w.woken = woken
	if !waitSlot {
		s.holdLocked(w)
	}
	// A run of an earlier acceptance of the same job may still be going
	// (its job was replaced by a doc edit and accepted again before the
	// halt reached this node): the job is no longer its, so it stops
	// writing now, and the new run starts once it has exited.
	previous := s.workers[job.ID]
	if previous != nil && previous.job == job {
		previous = nil
	}
	if previous != nil {
		previous.abandon(errRemoved)
	}
	s.workers[job.ID] = w
	if waitSlot {
		s.boundQuietLocked()
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		if rotated != nil {
			<-rotated.exited
		}
		if previous != nil {
			<-previous.exited
		}
		w.run()
		s.ended(w)
	}()
	s.spawnAcceptors(0)
	s.publishLoad()
	if woken {
		s.spawnAcceptorsUpTo(wakeAcceptors)
	}
}

// ended forgets a worker whose run has returned and lets an acceptor take
// its place.
func (s *Server) ended(w *worker) {
	s.mu.Lock()
	s.releaseLocked(w)
	if s.workers[w.job.ID] == w { // not a later acceptance of the same job
		delete(s.workers, w.job.ID)
	}
	if w.pid != "" {
		delete(s.byPID, w.pid)
	}
	rest := len(s.workers) == 0 && !s.stopping
	s.mu.Unlock()
	s.publishLoad()
	if rest {
		s.returnMemory()
	}
	s.spawnAcceptors(0)
}

// wakeAcceptors bounds the acceptors that woken jobs bring up. One write
// to a source wakes every job parked on it, and max_acceptors (CouchDB's
// 2) would start them two at a time, one queue commit each: 1,000 jobs of
// a fan-out took a second to accept. A woken job accepted brings the
// acceptors up to this bound, so that the others are accepted in shared
// commits; the ones without a job leave after their wait, as any
// acceptor beyond max_acceptors does.
const wakeAcceptors = 32

// spawnAcceptorsUpTo starts acceptors until n wait: wakeAcceptors after a
// woken job was accepted, adoptAcceptors after a full adoption.
func (s *Server) spawnAcceptorsUpTo(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.stopping && s.ctx != nil && s.acceptors < n {
		s.acceptors++
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.accept(false)
		}()
	}
}

// LiveStats returns the current stats of the job this node runs as worker
// pid, read from its replication at the moment of the call (fresher than
// the job's record, written only every stats_update_interval_sec); false
// when node is not this one or no worker is pid.
func (s *Server) LiveStats(node, pid string) (jobdata.Stats, bool) {
	if node != s.opts.Node {
		return jobdata.Stats{}, false
	}
	s.mu.Lock()
	w := s.byPID[pid]
	s.mu.Unlock()
	if w == nil || w.isDone() {
		return jobdata.Stats{}, false
	}
	get := w.live.Load()
	if get == nil {
		return jobdata.Stats{}, false
	}
	return jobdata.Stats((*get)()), true
}

// Lags returns the lag (jobdata.Stats.LagSec) of every job this node
// runs whose lag is known, as of the call.
func (s *Server) Lags() []int64 {
	s.mu.Lock()
	gets := make([]func() replicate.Stats, 0, len(s.byPID))
	for _, w := range s.byPID {
		if get := w.live.Load(); get != nil && !w.isDone() {
			gets = append(gets, *get)
		}
	}
	s.mu.Unlock()
	lags := make([]int64, 0, len(gets))
	for _, get := range gets {
		if l := get().LagSec; l != nil {
			lags = append(lags, *l)
		}
	}
	return lags
}

// StopJob stops this node's worker of a job that was removed (a
// cancelled _replicate, a deleted doc) and waits until it has stopped
// writing and written its final checkpoint, or ctx ends. A job this node
// does not run is not an error: a worker elsewhere stops at its next
// update, when the queue tells it the job is gone.
func (s *Server) StopJob(ctx context.Context, jobID string) error {
	s.mu.Lock()
	w := s.workers[jobID]
	s.mu.Unlock()
	if w == nil {
		return nil
	}
	w.stop(errRemoved)
	select {
	case <-w.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// returnMemory gives the memory of finished runs back to the system when,
// restDelay after the last job stopped, still no job runs (say every job
// is parked): with no allocation at rest the runtime would keep it for
// minutes. One check is pending at a time.
func (s *Server) returnMemory() {
	if !s.memCheck.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(restDelay, func() {
		s.mu.Lock()
		rest := len(s.workers) == 0 && !s.stopping
		s.mu.Unlock()
		if rest {
			debug.FreeOSMemory()
		}
		s.memCheck.Store(false)
	})
}

// restDelay is how long no job must run before returnMemory frees memory.
const restDelay = 5 * time.Second

// live counts the workers holding a slot not asked to stop. Callers hold s.mu.
func (s *Server) live() int {
	n := 0
	for _, w := range s.workers {
		if w.holding && w.stopCause() == nil {
			n++
		}
	}
	return n
}

// busy counts the slots taken for good: held by workers that do not hand
// theirs on (see slots.go). Callers hold s.mu.
func (s *Server) busy() int {
	return s.active - s.gatedLocked()
}

// rotationVictim picks the running job a rotation stops: the one Trim
// would stop first (a continuous job past min_run_time, highest fair-share
// priority first), or nil when none may be stopped. Callers hold s.mu.
func (s *Server) rotationVictim(cfg Config, now time.Time) *worker {
	count := s.heldByKey
	var list []Worker
	for id, w := range s.workers {
		if !w.holding || w.stopCause() != nil {
			continue
		}
		list = append(list, Worker{ID: id, Continuous: w.continuous, Started: w.started, Priority: s.share.Priority(id, w.key, count[w.key], cfg)})
	}
	stop := Trim(list, len(list)-1, cfg.MinRunTime, now, false)
	if len(stop) == 0 {
		return nil
	}
	return s.workers[stop[0]]
}

// nextPID names a worker as CouchDB shows Erlang pids in monitoring.
func (s *Server) nextPID() string { return fmt.Sprintf("<0.%d.0>", 1000+s.pids.Add(1)) }

// settled reports whether a Finish or Resubmit of job (what says which)
// took effect, logging when it did not. jobs.ErrHalt means the job was
// removed or taken over meanwhile: its new owner settles it. Any other
// error leaves the job locked until its lease expires, when the queue
// hands it out again; nothing is lost, but the delay is worth a warning.
func (s *Server) settled(what string, job *jobs.Job, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, jobs.ErrHalt) || errors.Is(err, jobs.ErrNotFound):
		s.log.Debug("job already settled elsewhere", "action", what, "job", job.ID, "error", err)
	default:
		s.log.Warn("could not settle job; it runs again when its lease expires", "action", what, "job", job.ID, "error", err)
	}
	return false
}
