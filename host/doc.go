// Package host is the library a Go CouchDB-compatible server embeds to run
// couchepi plugins (such as the replicator) as separate processes over
// hashicorp/go-plugin (gRPC, AutoMTLS, optional SHA-256 pinning).
//
// The server creates a Host with New, giving it its hooks.Services (server
// info, list dbs, changes, get doc, update doc as the system user), Loads
// plugin binaries, and calls the host on its own code paths:
//
//   - before every write: BeforeDocUpdate (synchronous; returns the doc to
//     store or a *hooks.Error to return as-is; 503 when no live plugin can
//     answer or it does not answer within HookTimeout — never unchecked);
//   - after a write is durable: AfterDocWrite (never blocks; per-plugin
//     bounded queue, per-db order, at-least-once; on overflow or while the
//     plugin is down the plugin is told to CatchUp from the changes feed);
//   - before returning a doc: AfterDocRead; after db create/delete:
//     AfterDBCreate/AfterDBDelete;
//   - for requests where HasRoute is true: ServeHTTP (mount the Host as an
//     http.Handler; put the authenticated user in the context with WithUser;
//     responses stream);
//   - /_active_tasks: merge ActiveTasks; config changes: SetConfig.
//
// Subscribed(hook, db) is lock-free and allocation-free, so a db no plugin
// subscribed to costs the write path nothing.
//
// Plugins are supervised: a crashed or unhealthy process is restarted with
// exponential backoff (100ms to 30s) and told to catch up; Reload swaps a
// plugin to a new binary while the server runs (the new process validates
// writes while the old one drains, then takes over its event queue).
// Plugin processes never outlive the server: on Linux they get a
// parent-death SIGKILL, and with Config.StateDir set, processes left over
// by a server that was killed are killed at the next New.
package host
