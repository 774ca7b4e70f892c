package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/sdk"
)

// greeter is a complete plugin: it rejects docs without a "greeting" in the
// "greetings" db, counts writes there, and serves GET /_greeter.
type greeter struct {
	mu     sync.Mutex
	writes int
}

func (g *greeter) Info() hooks.PluginInfo {
	return hooks.PluginInfo{
		Name: "greeter", Version: "1.0.0",
		Subscriptions: []hooks.Subscription{
			{Hook: hooks.BeforeDocUpdate, DB: "greetings"},
			{Hook: hooks.AfterDocWrite, DB: "greetings"},
		},
		Routes: []hooks.Route{{Method: "GET", Path: "/_greeter"}},
	}
}

func (g *greeter) Configure(context.Context, hooks.Config) error { return nil }
func (g *greeter) Start(context.Context, hooks.Services) error   { return nil }
func (g *greeter) Stop(context.Context) error                    { return nil }
func (g *greeter) CatchUp(ctx context.Context, db string) error  { return nil }
func (g *greeter) AfterDocWrite(context.Context, hooks.DocWrite) error {
	g.mu.Lock()
	g.writes++
	g.mu.Unlock()
	return nil
}

func (g *greeter) BeforeDocUpdate(_ context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	var body struct {
		Greeting string `json:"greeting"`
	}
	if json.Unmarshal(doc, &body) != nil || body.Greeting == "" {
		return nil, hooks.Forbidden("Every greeting needs a greeting.")
	}
	return doc, nil
}

func (g *greeter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fmt.Fprintf(w, "hello %s, %d writes\n", sdk.User(r).Name, g.writes)
}

// A plugin's main is one line: sdk.Serve(&greeter{}). Here its hooks and
// its route are called directly, as the host would call them.
func Example() {
	g := &greeter{}
	// func main() { sdk.Serve(g) }

	_, err := g.BeforeDocUpdate(context.Background(), "greetings", []byte(`{"_id":"a"}`), hooks.UserCtx{Name: "bob"})
	fmt.Println(err)
	g.AfterDocWrite(context.Background(), hooks.DocWrite{DB: "greetings", DocID: "b"})

	r := httptest.NewRequest("GET", "/_greeter", nil)
	r = r.WithContext(sdk.WithUser(r.Context(), hooks.UserCtx{Name: "bob"}))
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	fmt.Print(w.Body.String())
	// Output:
	// 403 forbidden: Every greeting needs a greeting.
	// hello bob, 1 writes
}
