// Package frontend turns what happens in `_replicator` dbs and
// `POST /_replicate` requests into replication jobs (CouchDB 4.x
// couch_replicator frontend): doc writes create, update or remove jobs,
// replicator db creation and deletion scan or drop theirs, catch-up reads
// each db's changes feed from the last processed seq so no update is
// missed, and the write-time and read-time rules of replication docs are
// applied.
package frontend

import (
	"context"
	"sync"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/hashicorp/go-hclog"
)

// RepIDFunc computes a replication's id (fetching user filter code from the
// source when needed); the plugin passes a closure over
// replicate.ComputeRepID.
type RepIDFunc func(ctx context.Context, rep *parse.Rep) (parse.RepID, error)

// Config is what the frontend needs to run.
type Config struct {
	// Queue holds the replication jobs and each replicator db's processed seq.
	Queue *jobs.Queue
	// Keys seals the credentials of the jobs' records (jobdata.Encode).
	Keys *seal.Keyring
	// Services reads replicator dbs (changes feeds, docs) and lists dbs.
	Services hooks.Services
	// Logger receives the frontend's logs (nil = none).
	Logger hclog.Logger
	// ServerUUID is the server's uuid (an input of transient job ids).
	ServerUUID string
	// LocalURL is the server's base URL: bare db names in POST /_replicate
	// bodies are rewritten against it.
	LocalURL string
	// RepID computes replication ids for POST /_replicate answers.
	RepID RepIDFunc
	// Now is the clock (nil = time.Now).
	Now func() time.Time
	// StopJob, when set, stops the local worker of a removed job and
	// returns once it has stopped writing (jobserver.Server.StopJob), so
	// that a cancel's answer means the replication has stopped.
	StopJob func(ctx context.Context, jobID string) error
}

// Frontend creates, updates and removes replication jobs.
type Frontend struct {
	cfg  Config
	recs jobstore.Records
	log  hclog.Logger

	optsMu sync.RWMutex
	opts   parse.Options

	dbMu    sync.Mutex
	dbLocks map[string]*sync.Mutex

	// The work done after doc changes are applied (afterwork.go).
	after       chan struct{} // a token per task running
	afterWG     sync.WaitGroup
	afterCtx    context.Context
	afterCancel context.CancelFunc

	counts counters // see Stats

	// dbUUIDs: replicator db → the instance uuid its stored position had
	// when StopReplaced last read it, to read that position and the doc's
	// job in one request.
	dbUUIDs sync.Map
}

// New returns a frontend over the queue in cfg.
func New(cfg Config) *Frontend {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Frontend{
		cfg:     cfg,
		recs:    jobstore.Records{Q: cfg.Queue, Keys: cfg.Keys},
		log:     cfg.Logger.Named("frontend"),
		opts:    parse.DefaultOptions(),
		dbLocks: map[string]*sync.Mutex{},
		after:   make(chan struct{}, afterTasks),
	}
	f.afterCtx, f.afterCancel = context.WithCancel(context.Background())
	return f
}

// SetOptions replaces the `[replicator]` defaults used to parse docs and bodies.
func (f *Frontend) SetOptions(o parse.Options) {
	f.optsMu.Lock()
	f.opts = o
	f.optsMu.Unlock()
}

// options returns the current parse options.
func (f *Frontend) options() parse.Options {
	f.optsMu.RLock()
	defer f.optsMu.RUnlock()
	return f.opts
}

// lockDB serialises the processing of one replicator db (events and
// catch-up), so its seq only moves forward in processing order. The host
// already delivers events and CatchUp calls one at a time; the lock orders
// them against StartCatchUp, which the plugin runs on its own.
func (f *Frontend) lockDB(db string) func() {
	f.dbMu.Lock()
	m, ok := f.dbLocks[db]
	if !ok {
		m = &sync.Mutex{}
		f.dbLocks[db] = m
	}
	f.dbMu.Unlock()
	m.Lock()
	return m.Unlock
}
