// Command greeter is a complete couchepi plugin in its own module, built
// the way a plugin outside this repository is built (see go.mod and
// docs/plugins.md). It refuses docs without a "greeting" in the dbs
// matching [greeter] dbs (default "greetings"), counts the writes there,
// and serves GET /_greeter.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/sdk"
)

// version is set at link time: go build -ldflags "-X main.version=2".
var version = "1"

type greeter struct {
	mu     sync.Mutex
	dbs    string
	writes int
}

// Info names the plugin and what it hooks; the host reads it after every
// Configure, so a config change can change the subscriptions.
func (g *greeter) Info() hooks.PluginInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return hooks.PluginInfo{
		Name: "greeter", Version: version,
		Subscriptions: []hooks.Subscription{
			{Hook: hooks.BeforeDocUpdate, DB: g.dbs},
			{Hook: hooks.AfterDocWrite, DB: g.dbs},
		},
		Routes: []hooks.Route{{Method: "GET", Path: "/_greeter"}},
	}
}

func (g *greeter) Configure(_ context.Context, cfg hooks.Config) error {
	g.mu.Lock()
	g.dbs = cfg.Get("greeter", "dbs", "greetings")
	g.mu.Unlock()
	return nil
}

func (g *greeter) Start(context.Context, hooks.Services) error {
	sdk.Logger().Info("greeter started", "version", version)
	return nil
}

func (g *greeter) Stop(context.Context) error { return nil }

// CatchUp is called when the host dropped events of db (its queue was
// full or the plugin was down); a counter has nothing to re-read.
func (g *greeter) CatchUp(context.Context, string) error { return nil }

// BeforeDocUpdate refuses a doc without a greeting. Deletes arrive as
// {"_id":…,"_rev":…,"_deleted":true} and are let through.
func (g *greeter) BeforeDocUpdate(_ context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	var body struct {
		Greeting string `json:"greeting"`
		Deleted  bool   `json:"_deleted"`
	}
	if json.Unmarshal(doc, &body) != nil || (body.Greeting == "" && !body.Deleted) {
		return nil, hooks.Forbidden("Every greeting needs a greeting.")
	}
	return doc, nil
}

func (g *greeter) AfterDocWrite(context.Context, hooks.DocWrite) error {
	g.mu.Lock()
	g.writes++
	g.mu.Unlock()
	return nil
}

func (g *greeter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"greeting": fmt.Sprintf("hello %s", sdk.User(r).Name),
		"writes":   g.writes, "version": version,
	})
}

func main() {
	sdk.Serve(&greeter{dbs: "greetings"})
}
