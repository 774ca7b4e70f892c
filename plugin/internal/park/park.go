// Package park lets continuous replications that have nothing to do give
// up their slot. A job that caught up and idled is parked: pending in the
// queue at jobstore.ParkedTime() (never due), with the source seq it
// checkpointed. A Waker re-enqueues it, at the front of the queue, once
// its source changes: for sources on the local server when the host says
// the db was updated (the db_updated hook), for other servers through one
// _db_updates feed per server and user.
//
// # No change is missed
//
// A job is registered before its source is checked: the check reads the
// source's changes since the parked seq and wakes the job if there are
// any, so a change made before registration is found by the check and one
// made after it by the signal. The same check runs for every parked job
// when a Waker starts (a new or restarted plugin process) and for every
// job of a server when its _db_updates feed (re)connects. A source that
// cannot be checked (unreachable) stays parked and is checked again at the
// next refresh; a server whose _db_updates cannot be read gets its jobs
// woken and is not used for parking for a while (Watchable says so).
//
// # Cost at rest
//
// A parked job costs one map entry. A remote server costs one feed while
// it has parked jobs; the local server costs nothing beyond the events
// the host delivers.
package park

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/hashicorp/go-hclog"
)

// Options configure a Waker.
type Options struct {
	// Queue is the job queue the parked jobs are in.
	Queue *jobs.Queue
	// Keys opens and seals the credentials of the jobs' records.
	Keys *seal.Keyring
	// Pool reaches the sources (checks and _db_updates feeds).
	Pool *couchclient.Pool
	// Logger receives structured logs; nil discards them.
	Logger hclog.Logger
	// LocalURL is the server's own base URL (hooks.ServerInfo.URL): jobs
	// whose source is under it are woken by DBUpdated.
	LocalURL string
	// Refresh, when positive, is how often the queue is read again for
	// jobs parked by other processes sharing it (and unreachable sources
	// are checked again). Zero reads it once, at Start, and checks
	// unreachable sources every minute.
	Refresh time.Duration
	// NoFeedFor is how long a server whose _db_updates could not be read
	// is not used for parking; 0 means 10 minutes.
	NoFeedFor time.Duration
}

// checkers bounds how many source checks run at once.
const checkers = 8

// Waker wakes parked jobs when their source changes. Its methods are safe
// for concurrent use.
type Waker struct {
	opts  Options
	log   hclog.Logger
	local string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	checks chan string   // job ids to check
	wakes  atomic.Uint64 // see Stats

	// Wakes waiting for their commit (see wakeAsync).
	wakeMu   sync.Mutex
	toWake   []string
	queued   map[string]bool
	wakeRuns int            // goroutines committing wakes
	wakeWG   sync.WaitGroup // of those goroutines
	wakeOff  bool           // set by Stop: no more of them

	mu       sync.Mutex
	jobs     map[string]*entry
	bySource map[source]map[string]*entry
	feeds    map[string]*feed     // remote server key -> its _db_updates feed
	noFeed   map[string]time.Time // remote server key -> until when it is not watchable
	recheck  map[string]bool      // jobs whose source could not be checked
	signals  map[source]*signal   // sources of quiet jobs (Watch)
}

// Stats are a Waker's event counts since New.
type Stats struct {
	Wakes uint64 // parked jobs woken (couchepi's)
}

// Stats returns the waker's counts so far.
func (w *Waker) Stats() Stats { return Stats{Wakes: w.wakes.Load()} }

// entry is one parked job.
type entry struct {
	id  string
	src source
	seq json.RawMessage
	ep  parse.Endpoint
	rep *parse.Rep
}

// New returns a Waker; Start runs it.
func New(opts Options) *Waker {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.NoFeedFor <= 0 {
		opts.NoFeedFor = 10 * time.Minute
	}
	return &Waker{
		opts:     opts,
		log:      opts.Logger.Named("park"),
		local:    localRoot(opts.LocalURL),
		checks:   make(chan string, 1024),
		queued:   map[string]bool{},
		jobs:     map[string]*entry{},
		bySource: map[source]map[string]*entry{},
		feeds:    map[string]*feed{},
		noFeed:   map[string]time.Time{},
		recheck:  map[string]bool{},
		signals:  map[source]*signal{},
	}
}

// Start registers every job parked in the queue, checks their sources,
// and keeps refreshing (see Options.Refresh) until Stop.
func (w *Waker) Start(ctx context.Context) error {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wakeMu.Lock()
	w.wakeOff = false
	w.wakeMu.Unlock()
	for range checkers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.checkLoop()
		}()
	}
	if err := w.refresh(ctx); err != nil {
		w.Stop()
		return err
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.refreshLoop()
	}()
	return nil
}

// Stop ends the feeds and checks. Parked jobs stay parked in the queue.
func (w *Waker) Stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
	w.wakeMu.Lock()
	w.wakeOff = true
	w.wakeMu.Unlock()
	w.wakeWG.Wait() // no wake reaches the queue once it is closed
}

// Watchable reports whether a job reading ep can be parked: its source is
// local, or on a server whose _db_updates feed was not found unreadable.
func (w *Waker) Watchable(ep parse.Endpoint) bool {
	src, local, ok := sourceOf(ep, w.local)
	if !ok {
		return false
	}
	if local {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.feedRefusedLocked(src.server)
}

// feedRefusedLocked reports whether server's _db_updates was found
// unreadable less than NoFeedFor ago, forgetting older findings. Callers
// hold w.mu.
func (w *Waker) feedRefusedLocked(server string) bool {
	until, bad := w.noFeed[server]
	if bad && time.Now().Before(until) {
		return true
	}
	delete(w.noFeed, server)
	return false
}

// Parked registers job id, just parked with rec (as stored), and checks
// its source for changes made since rec.Parked.Seq.
func (w *Waker) Parked(id string, rec *jobdata.Record) {
	if w.register(id, rec) {
		w.check(id)
	}
}

// DBUpdated wakes the jobs parked on local db and signals its watches.
func (w *Waker) DBUpdated(db string) {
	w.wakeSource(source{server: w.local, db: db})
}

// register adds a parked job; false when rec is not a parked job with a
// watchable source (it is then woken, so it runs rather than sleeps).
func (w *Waker) register(id string, rec *jobdata.Record) bool {
	if rec.Parked == nil || rec.State != jobdata.Pending || rec.Rep == nil {
		return false
	}
	src, local, ok := sourceOf(rec.Rep.Source, w.local)
	if !ok {
		w.wakeAsync(id)
		return false
	}
	e := &entry{id: id, src: src, seq: rec.Parked.Seq, ep: rec.Rep.Source, rep: rec.Rep}
	w.mu.Lock()
	if !local && w.feedRefusedLocked(src.server) {
		w.mu.Unlock()
		w.wakeAsync(id) // parked before its server was found unwatchable
		return false
	}
	defer w.mu.Unlock()
	if old := w.jobs[id]; old != nil {
		w.unregisterLocked(old)
	}
	w.jobs[id] = e
	m := w.bySource[src]
	if m == nil {
		m = map[string]*entry{}
		w.bySource[src] = m
	}
	m[id] = e
	if !local && w.feeds[src.server] == nil && w.ctx != nil {
		w.startFeedLocked(src.server, e)
	}
	return true
}

// unregisterLocked forgets e (and stops its server's feed when it was the
// server's last parked job). Callers hold w.mu.
func (w *Waker) unregisterLocked(e *entry) {
	if w.jobs[e.id] != e {
		return
	}
	delete(w.jobs, e.id)
	delete(w.recheck, e.id)
	if m := w.bySource[e.src]; m != nil {
		delete(m, e.id)
		if len(m) == 0 {
			delete(w.bySource, e.src)
		}
	}
	w.stopFeedIfUnusedLocked(e.src.server)
}

// stopFeedIfUnusedLocked stops server's feed when no parked job and no
// Watch reads from it. Callers hold w.mu.
func (w *Waker) stopFeedIfUnusedLocked(server string) {
	if f := w.feeds[server]; f != nil && !w.hasServerLocked(server) {
		f.cancel()
		delete(w.feeds, server)
	}
}

// hasServerLocked reports whether any parked job or Watch reads from server.
func (w *Waker) hasServerLocked(server string) bool {
	for src := range w.bySource {
		if src.server == server {
			return true
		}
	}
	for src := range w.signals {
		if src.server == server {
			return true
		}
	}
	return false
}

// wakeSource wakes every job parked on src and signals its watches.
func (w *Waker) wakeSource(src source) {
	w.mu.Lock()
	w.fireLocked(src)
	m := w.bySource[src]
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	w.wakeAsync(ids...)
}

// wakeServer wakes every job parked on a server.
func (w *Waker) wakeServer(server string) {
	w.wakeAsync(w.serverJobs(server)...)
}

// wakers bounds the goroutines committing wakes, wakeBatch the jobs one
// of them wakes in one queue transaction.
const (
	wakers    = 8
	wakeBatch = 32
)

// wakeAsync queues ids to be woken and returns at once: the host delivers
// db_updated events one at a time, and a caller waiting for the commits
// of a fan-out's thousand wakes held up every later event, and with them
// the signals of the quiet jobs (seconds). Up to wakers goroutines commit
// the queued wakes, wakeBatch jobs per queue transaction. Stop waits for
// them; wakes still queued when the Waker stops are dropped (the jobs stay
// parked, and a starting Waker checks every parked job).
func (w *Waker) wakeAsync(ids ...string) {
	w.wakeMu.Lock()
	defer w.wakeMu.Unlock()
	for _, id := range ids {
		if !w.queued[id] {
			w.queued[id] = true
			w.toWake = append(w.toWake, id)
		}
	}
	for !w.wakeOff && w.wakeRuns < wakers && w.wakeRuns*wakeBatch < len(w.toWake) {
		w.wakeRuns++
		w.wakeWG.Add(1)
		go w.drainWakes()
	}
}

// drainWakes commits queued wakes until none is left or the Waker stops.
func (w *Waker) drainWakes() {
	defer w.wakeWG.Done()
	for {
		w.wakeMu.Lock()
		n := min(len(w.toWake), wakeBatch)
		if n == 0 || w.stopped() {
			w.wakeRuns--
			w.wakeMu.Unlock()
			return
		}
		ids := append([]string(nil), w.toWake[:n]...)
		w.toWake = w.toWake[n:]
		if len(w.toWake) == 0 {
			w.toWake = nil // let the backing array go
		}
		for _, id := range ids {
			delete(w.queued, id)
		}
		w.wakeMu.Unlock()
		w.wakeAll(ids)
	}
}

// stopped reports whether Stop was called.
func (w *Waker) stopped() bool { return w.ctx != nil && w.ctx.Err() != nil }

// serverJobs lists the jobs parked on server.
func (w *Waker) serverJobs(server string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for src, m := range w.bySource {
		if src.server == server {
			for id := range m {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// wake re-enqueues a parked job at the front of the queue and forgets it.
// A job no longer parked (woken elsewhere, removed, changed) is only
// forgotten.
func (w *Waker) wake(id string) { w.wakeAll([]string{id}) }

// wakeAll wakes ids as wake does, in one queue transaction; when that
// fails, each in a transaction of its own, so that one job that cannot be
// woken does not hold the others up.
func (w *Waker) wakeAll(ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var woke int
	err := w.opts.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		woke = 0
		for _, id := range ids {
			rec, err := jobstore.Get(tx, w.opts.Keys, id)
			if errors.Is(err, jobs.ErrNotFound) || errors.Is(err, jobdata.ErrNewerFormat) {
				continue // gone, or a newer version's record: its nodes wake it
			}
			if err != nil {
				return err
			}
			if rec.Parked == nil || rec.State != jobdata.Pending {
				continue
			}
			rec.Parked = nil
			if err := tx.Add(jobdata.JobType, id, rec.Encode(w.opts.Keys, id), jobstore.WokenTime()); err != nil {
				return err
			}
			woke++
		}
		return nil
	})
	if err != nil && len(ids) > 1 {
		for _, id := range ids {
			w.wakeAll([]string{id})
		}
		return
	}
	if err != nil {
		// Left registered: the next refresh or signal tries again.
		w.log.Warn("could not wake parked job", "job", ids[0], "error", err)
		return
	}
	w.wakes.Add(uint64(woke))
	if woke > 0 {
		w.log.Debug("woke parked jobs", "jobs", woke)
	}
	w.mu.Lock()
	for _, id := range ids {
		if e := w.jobs[id]; e != nil {
			w.unregisterLocked(e)
		}
	}
	w.mu.Unlock()
}

// refreshLoop reads the queue again every Refresh (or checks unreachable
// sources every minute when Refresh is 0).
func (w *Waker) refreshLoop() {
	every := w.opts.Refresh
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		if w.opts.Refresh > 0 {
			if err := w.refresh(w.ctx); err != nil && w.ctx.Err() == nil {
				w.log.Warn("could not read parked jobs", "error", err)
			}
			continue
		}
		w.mu.Lock()
		ids := make([]string, 0, len(w.recheck))
		for id := range w.recheck {
			ids = append(ids, id)
		}
		w.mu.Unlock()
		for _, id := range ids {
			w.check(id)
		}
	}
}

// refresh registers the parked jobs of the queue this Waker does not know
// (checking their sources) and forgets the ones no longer parked.
func (w *Waker) refresh(ctx context.Context) error {
	seen := map[string]bool{}
	var fresh []string
	err := w.opts.Queue.Fold(ctx, jobdata.JobType, func(id string, st jobs.State, data []byte) error {
		if st != jobs.Pending {
			return nil
		}
		rec, err := jobdata.Decode(data, w.opts.Keys, id)
		if err != nil || rec.Parked == nil {
			return nil
		}
		seen[id] = true
		w.mu.Lock()
		e, known := w.jobs[id]
		recheck := w.recheck[id]
		w.mu.Unlock()
		if known && !recheck && string(e.seq) == string(rec.Parked.Seq) {
			return nil
		}
		if w.register(id, rec) {
			fresh = append(fresh, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.mu.Lock()
	for id, e := range w.jobs {
		if !seen[id] {
			w.unregisterLocked(e)
		}
	}
	w.mu.Unlock()
	for _, id := range fresh {
		w.check(id)
	}
	return nil
}
