// Command minicouch is a small CouchDB 3.x-compatible server that embeds the
// couchepi host, so CouchDB's replicator (and any other couchepi plugin)
// runs in it.
//
//	minicouch --addr 127.0.0.1:5984 --data DIR --admin NAME:PASSWORD \
//	    --plugin PATH [--plugin PATH…] [--config FILE] [--fauxton DIR]
//
// SIGTERM or SIGINT shut it down cleanly; SIGHUP reloads the plugins from
// their paths.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/couchepi/couchepi/examples/minicouch/couchapi"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/host"
	"github.com/couchepi/couchepi/internal/pprofserve"
	"github.com/hashicorp/go-hclog"
)

// listFlag is a repeatable string flag.
type listFlag []string

// String joins the values for flag's usage output.
func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Set appends one occurrence of the flag.
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "minicouch:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("minicouch", flag.ContinueOnError)
	addr := fs.String("addr", "", "listen address host:port (default from [chttpd] bind_address/port, 127.0.0.1:5984)")
	data := fs.String("data", "data", "data directory (store file, local.ini, plugin state)")
	configFile := fs.String("config", "", "CouchDB-style ini file read before <data>/local.ini")
	fauxton := fs.String("fauxton", "", "directory with Fauxton's static files served at /_utils/")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	node := fs.String("node", "", `node name in _membership, _node and _scheduler/jobs (default "nonode@nohost", or "minicouch@<listen address>" with [replicator] job_store = etcd)`)
	var admins, plugins listFlag
	fs.Var(&admins, "admin", "server admin NAME:PASSWORD (repeatable)")
	fs.Var(&plugins, "plugin", "plugin binary to load, PATH or PATH@SHA256 (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "minicouch", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})
	pprofserve.FromEnv(log, "MINICOUCH_PPROF") // profiles apart from the CouchDB API

	if err := os.MkdirAll(*data, 0o755); err != nil {
		return err
	}
	cfg, err := config.Load(*configFile, *data)
	if err != nil {
		return err
	}
	applyNodeTypeEnv(cfg)
	if err := setAdmins(cfg, admins); err != nil {
		return err
	}
	if err := auth.HashAdmins(cfg); err != nil {
		return err
	}

	st, err := store.Open(*data, storeOptions(cfg, log.Named("store")))
	if err != nil {
		return err
	}
	defer st.Close()

	listen := *addr
	if listen == "" {
		listen = net.JoinHostPort(cfg.GetDefault("chttpd", "bind_address", "127.0.0.1"), cfg.GetDefault("chttpd", "port", "5984"))
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	baseURL := "http://" + ln.Addr().String() + "/"

	nodeName := *node
	if nodeName == "" && cfg.GetDefault("replicator", "job_store", "bolt") == "etcd" {
		// Several nodes share the queue: tell them apart.
		nodeName = "minicouch@" + ln.Addr().String()
	}
	srv := couchapi.New(couchapi.Options{Store: st, Config: cfg, Logger: log.Named("http"), URL: baseURL, FauxtonDir: *fauxton, Node: nodeName})
	h := host.New(host.Config{Services: srv, Logger: log.Named("couchepi"), Config: cfg.All(),
		StateDir: filepath.Join(*data, "plugins")})
	srv.SetHooks(h)
	if err := srv.EnsureSystemDBs(context.Background()); err != nil {
		h.Close()
		return err
	}

	// Long-lived requests (continuous and longpoll feeds) end when
	// baseCancel is called during shutdown.
	baseCtx, baseCancel := context.WithCancel(context.Background())
	defer baseCancel()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second,
		BaseContext: func(net.Listener) context.Context { return baseCtx }}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	log.Info("minicouch listening", "url", baseURL, "data", *data)
	if cfg.GetDefault("prometheus", "additional_port", "false") == "true" {
		// CouchDB's unauthenticated scrape port: metrics and nothing else.
		paddr := net.JoinHostPort(cfg.GetDefault("prometheus", "bind_address", "127.0.0.1"), cfg.GetDefault("prometheus", "port", "17986"))
		pln, err := net.Listen("tcp", paddr)
		if err != nil {
			shutdown(log, hs, h, baseCancel)
			return fmt.Errorf("[prometheus] additional_port: %w", err)
		}
		ps := &http.Server{Handler: srv.PrometheusHandler(), ReadHeaderTimeout: 30 * time.Second}
		go ps.Serve(pln)
		defer ps.Close()
		log.Info("prometheus scrape port", "url", "http://"+pln.Addr().String()+"/_node/_local/_prometheus")
	}

	for _, p := range plugins {
		spec := host.Spec{Path: p}
		if i := strings.LastIndex(p, "@"); i > 0 && len(p)-i-1 == 64 {
			spec = host.Spec{Path: p[:i], SHA256: p[i+1:]}
		}
		if err := h.Load(context.Background(), spec); err != nil {
			log.Error("plugin failed to load", "path", spec.Path, "error", err)
			shutdown(log, hs, h, baseCancel)
			return fmt.Errorf("load plugin %s: %w", spec.Path, err)
		}
		log.Info("plugin loaded", "path", spec.Path)
	}
	// Scripts and tests wait for this line: the server is ready, plugins
	// included.
	fmt.Printf("minicouch listening on %s\n", baseURL)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for {
		select {
		case err := <-serveErr:
			shutdown(log, hs, h, baseCancel)
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				for _, p := range h.Plugins() {
					if err := h.Reload(context.Background(), p.Name, host.Spec{}); err != nil {
						log.Error("plugin reload failed", "plugin", p.Name, "error", err)
					} else {
						log.Info("plugin reloaded", "plugin", p.Name)
					}
				}
				continue
			}
			log.Info("shutting down", "signal", sig.String())
			shutdown(log, hs, h, baseCancel)
			return nil
		}
	}
}

// shutdown stops minicouch in dependency order. The plugins go first
// (host.Close drains them: the replicator's jobs write their final
// checkpoints through this server's HTTP API, which must still answer).
// Then the HTTP server stops accepting requests and lets short ones finish;
// after a second it ends the long-lived ones (feeds) through endFeeds and
// waits up to three more seconds. The store is closed last, by run's
// deferred Close.
func shutdown(log hclog.Logger, hs *http.Server, h *host.Host, endFeeds context.CancelFunc) {
	start := time.Now()
	if err := h.Close(); err != nil {
		log.Warn("plugin host close", "error", err)
	}
	log.Debug("plugins stopped", "took", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err := hs.Shutdown(ctx)
	cancel()
	if err != nil {
		endFeeds()
		ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
		if err := hs.Shutdown(ctx); err != nil {
			log.Warn("http shutdown", "error", err)
			hs.Close()
		}
		cancel()
	}
	log.Info("stopped", "took", time.Since(start))
}

// setAdmins stores each --admin NAME:PASSWORD in [admins], hashed; an
// existing hash that already matches the password is kept.
func setAdmins(cfg *config.Config, admins []string) error {
	for _, a := range admins {
		name, pw, ok := strings.Cut(a, ":")
		if !ok || name == "" {
			return fmt.Errorf("--admin wants NAME:PASSWORD")
		}
		if cur, ok := cfg.Get("admins", name); ok {
			if c, err := auth.ParseAdminHash(cur); err == nil && c.Verify(pw) {
				continue
			}
		}
		h, err := auth.HashAdminPassword(pw, cfg.GetDefault("chttpd_auth", "pbkdf2_prf", "sha256"), auth.Iterations(cfg))
		if err != nil {
			return err
		}
		if _, _, err := cfg.Set("admins", name, h); err != nil {
			return err
		}
	}
	return nil
}

// applyNodeTypeEnv maps CouchDB 4.x's node type variables onto `[node_types]`:
// COUCHDB_NODE_TYPE_API_FRONTEND and COUCHDB_NODE_TYPE_REPLICATION, when set,
// override the ini ("false" turns the type off; anything else, on).
func applyNodeTypeEnv(cfg *config.Config) {
	for env, key := range map[string]string{
		"COUCHDB_NODE_TYPE_API_FRONTEND": "api_frontend",
		"COUCHDB_NODE_TYPE_REPLICATION":  "replication",
	} {
		if v, ok := os.LookupEnv(env); ok {
			if v != "false" {
				v = "true"
			}
			cfg.Override("node_types", key, v)
		}
	}
}

// storeOptions reads the store's settings from [minicouch] (minicouch's
// own: CouchDB has no such keys) at start: file_compaction_min_free (bytes
// of free pages before a db delete or _compact compacts the file; unset or
// 0: 64 MiB, negative: never) and file_compaction_min_free_percent (the
// share of the file they must be too; unset or 0: 50).
func storeOptions(cfg *config.Config, log hclog.Logger) store.Options {
	return store.Options{
		Logger:                  log,
		FileCompactMinFree:      cfg.Int("minicouch", "file_compaction_min_free", 0),
		FileCompactMinFreeRatio: float64(cfg.Int("minicouch", "file_compaction_min_free_percent", 0)) / 100,
	}
}
