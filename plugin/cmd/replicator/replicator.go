package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/couchepi/couchepi/plugin/internal/frontend"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobserver"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/monitor"
	"github.com/couchepi/couchepi/plugin/internal/park"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/replicate"
	"github.com/couchepi/couchepi/sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// replicator is the plugin: it wires the store, the jobs queue, the
// frontend, the job server and the monitor together.
type replicator struct {
	log hclog.Logger

	mu         sync.Mutex
	conf       hooks.Config
	serverConf jobserver.Config
	parseOpts  parse.Options
	// localURL is the server's base URL (hooks.ServerInfo.URL), once
	// known: the host policy always lets replications reach it.
	localURL string

	host    hooks.Services
	store   kv.Store
	queue   *jobs.Queue
	pool    *couchclient.Pool
	runs    *replicate.Group // the job server's replications, for the plugin's life
	front   *frontend.Frontend
	server  *jobserver.Server
	mon     *monitor.Handler
	waker   *park.Waker
	recs    jobstore.Records
	src     monitor.Source // recs, with this node's running jobs live
	stopMon context.CancelFunc
	started bool
	events  sync.WaitGroup // event and catch-up calls in progress
	// cancelStart ends a background start still waiting for its store;
	// startErr is why a background start gave up.
	cancelStart context.CancelFunc
	startErr    error

	// metricsRegistry is the replicator's registry, made at the first
	// scrape (Metrics).
	metricsOnce     sync.Once
	metricsRegistry *prometheus.Registry
}

func newReplicator(log hclog.Logger) *replicator {
	return &replicator{log: log, serverConf: jobserver.DefaultConfig(), parseOpts: parse.DefaultOptions(), runs: new(replicate.Group)}
}

// Info declares the hooks and routes of the replicator. A node that is not
// an api_frontend still validates replicator docs and hides credentials
// (writes may land on any node), but turns no doc into a job and serves no
// route.
func (p *replicator) Info() hooks.PluginInfo {
	p.mu.Lock()
	nt := readNodeTypes(p.conf)
	parking := p.serverConf.IdlePark > 0
	p.mu.Unlock()
	var subs []hooks.Subscription
	if parking {
		// Any local db may be the source of a parked job.
		subs = append(subs, hooks.Subscription{Hook: hooks.DBUpdated, DB: "*"})
	}
	for _, h := range hooks.All() {
		if h == hooks.DBUpdated || !nt.apiFrontend && h != hooks.BeforeDocUpdate && h != hooks.AfterDocRead {
			continue
		}
		for _, db := range jobdata.ReplicatorDBPatterns() {
			subs = append(subs, hooks.Subscription{Hook: h, DB: db})
		}
	}
	info := hooks.PluginInfo{Name: "replicator", Version: version, Subscriptions: subs}
	if nt.apiFrontend {
		info.Routes = []hooks.Route{
			{Method: http.MethodPost, Path: "/_replicate"},
			{Method: http.MethodGet, Path: "/_scheduler/jobs"},
			{Method: http.MethodGet, Path: "/_scheduler/jobs/*"},
			{Method: http.MethodGet, Path: "/_scheduler/docs"},
			{Method: http.MethodGet, Path: "/_scheduler/docs/*"},
		}
	}
	return info
}

// Configure reads the `[replicator]` and `[replicator.shares]` sections;
// bad values are logged and keep their defaults. Changes apply at once.
func (p *replicator) Configure(_ context.Context, cfg hooks.Config) error {
	sc, err := jobserver.ParseConfig(cfg["replicator"], cfg["replicator.shares"])
	if err != nil {
		p.log.Warn("replicator config", "error", err)
	}
	po, err := parse.OptionsFromConfig(cfg["replicator"])
	if err != nil {
		p.log.Warn("replicator config", "error", err)
	}
	p.mu.Lock()
	p.conf, p.serverConf, p.parseOpts = cfg, sc, po
	front, server, pool := p.front, p.server, p.pool
	p.mu.Unlock()
	if pool != nil {
		if err := pool.Configure(po); err != nil {
			p.log.Warn("replicator config", "error", err)
		}
	}
	if front != nil {
		front.SetOptions(po)
	}
	if server != nil {
		server.SetConfig(sc)
	}
	return nil
}

// Start opens the job store (waiting for a previous process to release
// it), catches up with every replicator db and starts the job server.
//
// With job_store = etcd, Start returns at once and the rest happens in
// the background, retrying until etcd answers: the server comes up (doc
// writes are validated, their events caught up later) while _replicate
// and _scheduler/* answer 503.
func (p *replicator) Start(ctx context.Context, host hooks.Services) error {
	p.mu.Lock()
	conf := p.conf
	p.host = host // validation needs it even while the store is not open
	p.mu.Unlock()
	stc, err := readStoreConfig(conf)
	if err != nil {
		return err
	}
	keys, err := loadKeyring(conf, stc, p.log)
	if err != nil {
		return err
	}
	if stc.kind != "etcd" {
		return p.start(ctx, host, stc, keys)
	}
	bg, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	p.cancelStart = cancel
	p.mu.Unlock()
	go func() {
		if err := p.start(bg, host, stc, keys); err != nil && bg.Err() == nil {
			p.log.Error("replicator could not start", "store", stc.String(), "error", err)
			p.mu.Lock()
			p.startErr = err
			p.mu.Unlock()
		}
	}()
	return nil
}

func (p *replicator) start(ctx context.Context, host hooks.Services, stc storeConfig, keys keyring) error {
	info, err := host.ServerInfo(ctx)
	if err != nil {
		return fmt.Errorf("server info: %w", err)
	}
	p.mu.Lock()
	conf, sc, po := p.conf, p.serverConf, p.parseOpts
	p.mu.Unlock()
	nt := readNodeTypes(conf)
	store, q, err := openSealedQueue(ctx, stc, keys, &info.UUID, p.log)
	if err != nil {
		return err
	}
	pool := couchclient.NewPool(couchclient.PoolOptions{Logger: p.log, Version: version, HealthThreshold: sc.HealthThreshold, LocalURL: info.URL})
	if err := pool.Configure(po); err != nil {
		p.log.Warn("replicator config", "error", err)
	}
	repID := func(ctx context.Context, rep *parse.Rep) (parse.RepID, error) {
		return replicate.ComputeRepID(ctx, rep, info.UUID, pool)
	}
	// Every node wakes the parked jobs whose source it hosts; on a shared
	// queue it also reads the jobs other nodes parked.
	refresh := time.Duration(0)
	if stc.kind != "bolt" {
		refresh = parkRefresh
	}
	waker := park.New(park.Options{Queue: q, Keys: keys.Keyring, Pool: pool, Logger: p.log, LocalURL: info.URL, Refresh: refresh})
	if err := waker.Start(ctx); err != nil {
		q.Close()
		store.Close()
		return fmt.Errorf("parked jobs: %w", err)
	}
	var server *jobserver.Server
	stopJob := func(ctx context.Context, jobID string) error {
		if server == nil {
			return nil
		}
		return server.StopJob(ctx, jobID)
	}
	front := frontend.New(frontend.Config{Queue: q, Keys: keys.Keyring, Services: host, Logger: p.log, ServerUUID: info.UUID, LocalURL: info.URL, RepID: repID, StopJob: stopJob})
	front.SetOptions(po)
	if nt.replication {
		// On a shared queue the doc of a job may live on another server:
		// the api_frontend that has it writes its terminal state.
		server = jobserver.New(jobserver.Options{Queue: q, Keys: keys.Keyring, Services: host, Logger: p.log, Pool: pool, Group: p.runs, ServerUUID: info.UUID, Node: info.Node, RepID: repID,
			SkipDocStates: stc.kind != "bolt", Parker: parker{waker}, Replaces: previousProcess(info.Node)}, sc)
		// A single-owner (bolt) store's running jobs were left by a dead
		// process; in a shared store they may be another node's, and the
		// queue's activity monitor re-enqueues those of dead nodes.
		if err := server.Start(ctx, stc.kind == "bolt"); err != nil {
			waker.Stop()
			q.Close()
			store.Close()
			return err
		}
	}
	monCtx, stopMon := context.WithCancel(context.Background())
	go q.RunMonitors(monCtx)
	if nt.apiFrontend && stc.kind != "bolt" {
		go front.WriteDocStates(monCtx, sc.Interval)
	}
	p.mu.Lock()
	if ctx.Err() != nil { // Stop came while a background start waited
		p.mu.Unlock()
		stopMon()
		if server != nil {
			server.Stop(context.Background())
		}
		waker.Stop()
		q.Close()
		store.Close()
		return ctx.Err()
	}
	p.host, p.store, p.queue, p.pool, p.front, p.server, p.waker = host, store, q, pool, front, server, waker
	p.localURL = info.URL
	p.recs = jobstore.Records{Q: q, Keys: keys.Keyring}
	p.src = p.recs
	if server != nil {
		// The jobs this node runs show their stats as of the request.
		p.src = monitor.WithLive(p.recs, server.LiveStats)
	}
	p.mon = monitor.New(p.src)
	if nt.apiFrontend {
		// A doc written just before a _scheduler read is a job in it.
		p.mon.Settle = func(ctx context.Context) { front.Settle(ctx, settleWait) }
	}
	p.stopMon, p.started = stopMon, true
	p.mu.Unlock()
	if nt.apiFrontend {
		go func() {
			if err := front.StartCatchUp(context.Background()); err != nil {
				p.log.Warn("catch-up at start incomplete", "error", err)
			}
		}()
	}
	p.log.Info("replicator started", "version", version, "store", stc.String(), "node", info.Node, "key", keys.ID(), "key_from", keys.source,
		"api_frontend", nt.apiFrontend, "replication", nt.replication)
	return nil
}

// Stop checkpoints and re-enqueues every running job, then releases the
// store so a new process can open it.
func (p *replicator) Stop(ctx context.Context) error {
	p.mu.Lock()
	started := p.started
	p.started = false
	if p.cancelStart != nil {
		p.cancelStart()
	}
	p.mu.Unlock()
	if !started {
		return nil
	}
	start := time.Now()
	events := make(chan struct{})
	go func() { p.events.Wait(); close(events) }()
	select {
	case <-events:
	case <-ctx.Done():
		p.log.Warn("doc events still being applied at stop; the host will catch them up", "error", ctx.Err())
	}
	p.front.Close()
	var err error
	if p.server != nil {
		err = p.server.Stop(ctx)
	}
	p.waker.Stop()
	p.stopMon()
	p.queue.Close()
	if cerr := p.store.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	p.log.Info("replicator stopped", "took", time.Since(start).Round(time.Millisecond).String())
	return err
}

// parkRefresh is how often a node sharing the queue reads the jobs other
// nodes parked, so it wakes those whose source it hosts.
const parkRefresh = 10 * time.Second

// components returns the started frontend and monitor, or nil before Start.
func (p *replicator) components() (*frontend.Frontend, *monitor.Handler, jobstore.Records) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		return nil, nil, jobstore.Records{}
	}
	return p.front, p.mon, p.recs
}

// errNotStarted is returned by event hooks that arrive before Start; the
// host then schedules a catch-up.
var errNotStarted = errors.New("replicator not started")

// BeforeDocUpdate validates a replication doc (served before Start too).
func (p *replicator) BeforeDocUpdate(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	opts, err := p.docOptions(ctx)
	if err != nil {
		return nil, err
	}
	out, err := frontend.BeforeDocUpdate(db, doc, user, opts, func(id string) ([]byte, error) {
		p.mu.Lock()
		host := p.host
		p.mu.Unlock()
		if host == nil {
			return nil, &hooks.Error{Status: 503, Err: "service_unavailable", Reason: "replicator starting; retry"}
		}
		cur, err := host.GetDoc(ctx, db, id)
		var he *hooks.Error
		if errors.As(err, &he) && he.Status == 404 {
			return nil, nil
		}
		return cur, err
	})
	if err != nil || user.IsReplicator() {
		return out, err
	}
	// The write is valid: the run it replaces stops before it is stored.
	if front, _, _ := p.components(); front != nil {
		front.StopReplaced(ctx, db, out)
	}
	return out, nil
}

// docOptions returns the `[replicator]` options replication docs are
// validated with: its LocalURL is the server's own, which the host policy
// (the default one too) always allows, asked of the host the first time it
// is needed before Start.
func (p *replicator) docOptions(ctx context.Context) (parse.Options, error) {
	p.mu.Lock()
	o, local, host := p.parseOpts, p.localURL, p.host
	p.mu.Unlock()
	if o.Hosts.Unlimited || local != "" {
		o.LocalURL = local
		return o, nil
	}
	if host == nil {
		if !o.Hosts.Active() {
			// Only the default denials, which name no local address:
			// docs are checked without the server's URL, as before a
			// policy existed, and every connection is checked again
			// when it is dialled. Refusing here would refuse every
			// replicator write during a version swap, before Start.
			return o, nil
		}
		return o, &hooks.Error{Status: 503, Err: "service_unavailable", Reason: "replicator starting; retry"}
	}
	info, err := host.ServerInfo(ctx)
	if err != nil {
		return o, &hooks.Error{Status: 503, Err: "service_unavailable", Reason: "replicator starting; retry"}
	}
	p.mu.Lock()
	p.localURL = info.URL
	p.mu.Unlock()
	o.LocalURL = info.URL
	return o, nil
}

// AfterDocRead strips credentials for readers who do not own the doc.
func (p *replicator) AfterDocRead(_ context.Context, _ string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	return frontend.AfterDocRead(doc, user), nil
}

// settleWait bounds how long a _scheduler read waits for earlier writes
// to replicator dbs to become jobs.
const settleWait = 2 * time.Second

// withFrontend runs fn with the started frontend (errNotStarted before
// Start); Stop waits for such calls to end before it closes the queue.
func (p *replicator) withFrontend(fn func(*frontend.Frontend) error) error {
	p.mu.Lock()
	if !p.started {
		p.mu.Unlock()
		return errNotStarted
	}
	f := p.front
	p.events.Add(1)
	p.mu.Unlock()
	defer p.events.Done()
	return fn(f)
}

// AfterDocWrites turns replication doc writes into job changes, durably
// before the host counts them delivered.
func (p *replicator) AfterDocWrites(ctx context.Context, db string, evs []hooks.DocWrite) error {
	return p.withFrontend(func(f *frontend.Frontend) error { return f.AfterDocWrites(ctx, db, evs) })
}

// AfterDBCreate scans a new or restored replicator db.
func (p *replicator) AfterDBCreate(ctx context.Context, db, uuid string) error {
	return p.withFrontend(func(f *frontend.Frontend) error { return f.AfterDBCreate(ctx, db, uuid) })
}

// AfterDBDelete removes the jobs of a deleted replicator db.
func (p *replicator) AfterDBDelete(ctx context.Context, db, uuid string) error {
	return p.withFrontend(func(f *frontend.Frontend) error { return f.AfterDBDelete(ctx, db, uuid) })
}

// DBUpdated wakes the jobs parked on local db.
func (p *replicator) DBUpdated(_ context.Context, db, _ string) error {
	p.mu.Lock()
	w := p.waker
	started := p.started
	p.mu.Unlock()
	if !started {
		return errNotStarted // the host sends CatchUp once we have started
	}
	w.DBUpdated(db)
	return nil
}

// CatchUp re-reads a replicator db's changes since the last processed seq;
// for any db, it wakes the jobs parked on it (its db_updated events were
// dropped).
func (p *replicator) CatchUp(ctx context.Context, db string) error {
	if err := p.DBUpdated(ctx, db, ""); err != nil {
		return err
	}
	if !jobdata.IsReplicatorDB(db) {
		return nil
	}
	return p.withFrontend(func(f *frontend.Frontend) error { return f.CatchUp(ctx, db) })
}

// ActiveTasks returns the `_active_tasks` entries of running replications.
func (p *replicator) ActiveTasks(ctx context.Context) ([]json.RawMessage, error) {
	p.mu.Lock()
	src, started := p.src, p.started
	p.mu.Unlock()
	if !started {
		return nil, nil
	}
	return monitor.ActiveTasks(ctx, src)
}

// Health reports the plugin process healthy whenever it answers. An
// unreachable job store is a degraded state, not a dead plugin: a new
// process would find the same store, so the routes answer 503 with the
// reason instead (probeStore) and the jobs stop and resume with their
// leases.
func (p *replicator) Health(context.Context) error { return nil }

// previousProcess recognises the lease of this node's previous plugin
// process on this host, when that process is gone (killed; the host
// started this one): its jobs are re-enqueued at once.
func previousProcess(node string) func(jobs.LeaseInfo) bool {
	host, _ := os.Hostname()
	self := os.Getpid()
	return func(l jobs.LeaseInfo) bool {
		return l.Node == node && l.Host == host && l.PID != self && !processAlive(l.PID)
	}
}

// ServeHTTP serves `POST /_replicate` and the `/_scheduler/*` routes.
func (p *replicator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, mon, _ := p.components()
	if f == nil {
		reason := "The replicator is starting."
		p.mu.Lock()
		switch {
		case p.startErr != nil && sdk.User(r).IsAdmin():
			reason = "The replicator could not start: " + p.startErr.Error()
		case p.startErr != nil:
			// Why is the operators' business: it names config files and
			// stores, which no client needs to know of.
			reason = "The replicator could not start; the server's log says why."
		}
		p.mu.Unlock()
		hooks.WriteError(w, &hooks.Error{Status: http.StatusServiceUnavailable, Err: "service_unavailable", Reason: reason})
		return
	}
	if err := p.probeStore(r.Context()); err != nil {
		hooks.WriteError(w, &hooks.Error{Status: http.StatusServiceUnavailable, Err: "service_unavailable", Reason: "The replication job queue is unavailable: " + err.Error()})
		return
	}
	user := sdk.User(r)
	switch path := r.URL.EscapedPath(); {
	case path == "/_replicate":
		f.Replicate(w, r, user)
	case strings.HasPrefix(path, "/_scheduler/"):
		mon.Serve(w, r, user.IsAdmin())
	default:
		hooks.WriteError(w, &hooks.Error{Status: http.StatusNotFound, Err: "not_found", Reason: "missing"})
	}
}

// storeProbeTimeout bounds probeStore: more than an etcd failover takes
// (a new leader within about 2 s of the old one's death; the store sends
// each request again to the members left, kv/etcd's failover.go), so that
// one dead member never turns a request into a 503 while quorum stands.
const storeProbeTimeout = 5 * time.Second

// probeStore checks, within a few seconds, that the job store answers, so
// that a request does not wait on an unreachable etcd.
func (p *replicator) probeStore(ctx context.Context) error {
	p.mu.Lock()
	store := p.store
	p.mu.Unlock()
	if store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeProbeTimeout)
	defer cancel()
	return store.View(ctx, func(tx kv.ReadTx) error {
		_, err := tx.Get([]byte("probe"))
		return err
	})
}

// parker is the Waker as the job server's Parker.
type parker struct{ *park.Waker }

// Watch returns the Waker's Watch of ep's source, nil when it has none.
func (p parker) Watch(ep parse.Endpoint, rep *parse.Rep) jobserver.SourceWatch {
	if w := p.Waker.Watch(ep, rep); w != nil {
		return w
	}
	return nil
}
