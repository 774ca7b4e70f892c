// Package sdk is what a couchepi plugin author imports. A plugin implements
// Plugin (plus the optional interfaces for the hooks it subscribes to, and
// http.Handler when it declares routes) and calls Serve from main. gRPC,
// go-plugin and the broker stay hidden: the plugin sees hooks types, the
// hooks.Services client passed to Start, and plain net/http for its routes.
//
// Call order: Configure (at start and on every config change), Info, then
// sync hooks (BeforeDocUpdate, AfterDocRead) may already arrive, then Start,
// after which after_* events and CatchUp flow, and finally Stop, which must
// drain: finish in-flight work, checkpoint and release files, because during
// a version swap a new process takes over right after Stop returns.
package sdk

import (
	"context"
	"encoding/json"

	"github.com/couchepi/couchepi/hooks"
)

// Plugin is the interface every couchepi plugin implements.
type Plugin interface {
	// Info declares the plugin's name, version, subscriptions and routes. It
	// is asked again after every Configure, so subscriptions may depend on config.
	Info() hooks.PluginInfo
	// Configure receives the server config at start and on every config change.
	Configure(ctx context.Context, cfg hooks.Config) error
	// Start is called once the plugin may call the host; after it, after_*
	// events flow. Sync hooks may be served before Start.
	Start(ctx context.Context, host hooks.Services) error
	// Stop drains: finish in-flight work, checkpoint, release files.
	Stop(ctx context.Context) error
}

// BeforeDocUpdater is implemented by plugins subscribing to before_doc_update.
// Return the (possibly changed) doc, or a *hooks.Error to reject the write.
type BeforeDocUpdater interface {
	BeforeDocUpdate(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error)
}

// AfterDocReader is implemented by plugins subscribing to after_doc_read; it
// returns the doc the reader gets.
type AfterDocReader interface {
	AfterDocRead(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error)
}

// AfterDocWriter is implemented by plugins subscribing to after_doc_write. An
// error makes the host send CatchUp for the event's db.
type AfterDocWriter interface {
	AfterDocWrite(ctx context.Context, ev hooks.DocWrite) error
}

// DocWriteBatcher is implemented by plugins subscribing to after_doc_write
// that apply events a batch at a time (say, one transaction per batch): evs
// are consecutive after_doc_write events of db from one host delivery, in
// write order. The host acknowledges them only after AfterDocWrites returns,
// so a plugin can apply them synchronously and durably; an error makes the
// host send CatchUp for db. A plugin implementing it gets no AfterDocWrite
// calls.
type DocWriteBatcher interface {
	AfterDocWrites(ctx context.Context, db string, evs []hooks.DocWrite) error
}

// DBWatcher is implemented by plugins subscribing to after_db_create or
// after_db_delete.
type DBWatcher interface {
	AfterDBCreate(ctx context.Context, db, uuid string) error
	AfterDBDelete(ctx context.Context, db, uuid string) error
}

// DBUpdateWatcher is implemented by plugins subscribing to db_updated: db's
// update sequence moved to seq (undelivered events of a db are coalesced,
// so one call may stand for many writes).
type DBUpdateWatcher interface {
	DBUpdated(ctx context.Context, db, seq string) error
}

// CatchUpper is implemented by plugins that receive after_* events: events
// for db were dropped, so re-read its changes feed since the last processed seq.
type CatchUpper interface {
	CatchUp(ctx context.Context, db string) error
}

// HealthChecker is implemented by plugins that can report their own health;
// an error makes the host restart the plugin.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// ActiveTasker is implemented by plugins contributing to /_active_tasks.
type ActiveTasker interface {
	ActiveTasks(ctx context.Context) ([]json.RawMessage, error)
}
