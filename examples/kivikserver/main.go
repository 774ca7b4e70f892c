// Command kivikserver is kivik's experimental CouchDB server
// (github.com/go-kivik/kivik/v4/x/server, unchanged, over the in-memory
// x/memorydb driver) with couchepi's plugin host around it: the
// replicator plugin validates _replicator docs written to it, runs their
// replications and serves _replicate, _scheduler/* and the replication
// entries of _active_tasks, without a line of kivik's code changed.
//
//	go build -o ../../bin/kivikserver .
//	../../bin/kivikserver -addr 127.0.0.1:5985 -admin admin:pass -plugin ../../bin/replicator
//
// See README.md for what x/server lacks as a replication endpoint.
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
	"strings"
	"syscall"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/host"
	"github.com/go-kivik/kivik/v4"
	_ "github.com/go-kivik/kivik/v4/x/memorydb" // the "memory" driver
	"github.com/go-kivik/kivik/v4/x/server"
	"github.com/go-kivik/kivik/v4/x/server/auth"
	"github.com/hashicorp/go-hclog"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kivikserver:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:5985", "listen address host:port")
	admin := flag.String("admin", "admin:pass", "server admin NAME:PASSWORD")
	state := flag.String("state", "", "directory for the plugins' durable files (the replicator's job store); \"\" = a temporary one")
	node := flag.String("node", "kivik@nohost", "node name shown in _scheduler/jobs")
	var plugins, settings, userFlags listFlag
	flag.Var(&plugins, "plugin", "plugin binary to load, PATH or PATH@SHA256 (repeatable)")
	flag.Var(&userFlags, "user", "a user who is not an admin, NAME:PASSWORD (repeatable)")
	flag.Var(&settings, "set", "plugin config SECTION.KEY=VALUE (repeatable), e.g. replicator.max_jobs=100")
	logLevel := flag.String("log-level", "info", "log level: trace, debug, info, warn, error")
	flag.Parse()

	log := hclog.New(&hclog.LoggerOptions{Name: "kivikserver", Level: hclog.LevelFromString(*logLevel)})
	name, pass, ok := strings.Cut(*admin, ":")
	if !ok || name == "" {
		return errors.New("-admin must be NAME:PASSWORD")
	}
	cfg := hooks.Config{}
	for _, s := range settings {
		key, value, ok := strings.Cut(s, "=")
		section, k, ok2 := strings.Cut(key, ".")
		if !ok || !ok2 {
			return fmt.Errorf("-set %q: want SECTION.KEY=VALUE", s)
		}
		if cfg[section] == nil {
			cfg[section] = map[string]string{}
		}
		cfg[section][k] = value
	}
	if *state == "" {
		dir, err := os.MkdirTemp("", "kivikserver-state-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*state = dir
	}

	ctx := context.Background()
	client, err := kivik.New("memory", "")
	if err != nil {
		return err
	}
	for _, db := range []string{"_users", "_replicator"} {
		if err := client.CreateDB(ctx, db); err != nil {
			return fmt.Errorf("create %s: %w", db, err)
		}
	}
	users := auth.NewMemoryUserStore()
	if err := users.AddUser(name, pass, []string{auth.RoleAdmin}); err != nil {
		return err
	}
	for _, u := range userFlags {
		n, p, ok := strings.Cut(u, ":")
		if !ok || n == "" {
			return fmt.Errorf("-user %q: want NAME:PASSWORD", u)
		}
		if err := users.AddUser(n, p, nil); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/"

	svc := newServices(client, hooks.ServerInfo{UUID: randomUUID(), Version: "3.5.0", Vendor: "kivik x/server", Node: *node, URL: url})
	h := host.New(host.Config{Services: svc, Logger: log, Config: cfg, StateDir: *state})
	defer h.Close()
	svc.host = h
	for _, p := range plugins {
		spec := host.Spec{Path: p}
		if path, sum, ok := strings.Cut(p, "@"); ok {
			spec = host.Spec{Path: path, SHA256: sum}
		}
		if err := h.Load(ctx, spec); err != nil {
			return err
		}
	}

	kivikServer := server.New(client, server.WithUserStores(users), server.WithAuthHandlers(auth.BasicAuth()))
	user := basicAuthUser(users)
	handler := &host.Middleware{
		Host:      h,
		Next:      kivikServer,
		User:      user,
		Written:   func(ctx context.Context, db, id, _ string) (hooks.DocWrite, error) { return svc.written(ctx, db, id) },
		DBCreated: svc.dbCreated,
		DBDeleted: svc.dbDeleted,
	}
	srv := &http.Server{Handler: &pluginAdmin{host: h, user: user, next: handler}, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Println("kivikserver listening on " + url)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-errc:
		return err
	case <-sig:
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	return nil
}

// basicAuthUser returns the user of a request's Basic credentials as the
// kivik server's user store knows them; anonymous when absent or wrong
// (the kivik server then refuses the request itself).
func basicAuthUser(users *auth.MemoryUserStore) func(*http.Request) hooks.UserCtx {
	return func(r *http.Request) hooks.UserCtx {
		name, pass, ok := r.BasicAuth()
		if !ok {
			return hooks.UserCtx{}
		}
		u, err := users.Validate(r.Context(), name, pass)
		if err != nil {
			return hooks.UserCtx{}
		}
		return hooks.UserCtx{Name: u.Name, Roles: u.Roles}
	}
}
