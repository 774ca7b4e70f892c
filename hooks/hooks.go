// Package hooks is the couchepi hook contract shared by the host (what a
// server embeds) and the sdk (what a plugin imports): hook names, the user
// context of a request, CouchDB-shaped errors, subscription and route
// declarations, hook event payloads and the Services a server offers to
// plugins. The wire form of the contract is hooks.proto (package hookspb).
package hooks

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/couchepi/couchepi/internal/couchuser"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// Hook names one of the couch_epi-style hooks a plugin can subscribe to.
type Hook string

// The hooks a server dispatches to plugins.
const (
	// BeforeDocUpdate runs synchronously before every write to a subscribed db;
	// the plugin returns the (possibly changed) doc or a rejection. The doc
	// carries the revision the write names, wherever the request gave it
	// (body, ?rev= or If-Match), as CouchDB's does: a doc without `_rev` is
	// a create.
	BeforeDocUpdate Hook = "before_doc_update"
	// AfterDocWrite runs asynchronously after a write is durable.
	AfterDocWrite Hook = "after_doc_write"
	// AfterDocRead runs synchronously before a doc of a subscribed db is returned.
	AfterDocRead Hook = "after_doc_read"
	// AfterDBCreate runs asynchronously after a db was created.
	AfterDBCreate Hook = "after_db_create"
	// AfterDBDelete runs asynchronously after a db was deleted.
	AfterDBDelete Hook = "after_db_delete"
	// DBUpdated runs asynchronously after a write changed a db's update
	// sequence (CouchDB's couch_event db_updated). It carries the db and
	// its new update sequence, no document; the host coalesces the events
	// of a db that wait for delivery into the newest one, so a plugin sees
	// "db changed since you last looked", not every write.
	DBUpdated Hook = "db_updated"
)

// All returns every hook, in a fixed order: the index of a hook in it is
// stable across releases.
func All() []Hook {
	return []Hook{BeforeDocUpdate, AfterDocWrite, AfterDocRead, AfterDBCreate, AfterDBDelete, DBUpdated}
}

// Valid reports whether h is one of the known hooks.
func (h Hook) Valid() bool {
	for _, k := range All() {
		if h == k {
			return true
		}
	}
	return false
}

// UserCtx is CouchDB's user context of a request: Name "" is anonymous
// and encodes as JSON null, and Roles encodes as an array even when nil.
// Its methods: HasRole(role), IsAdmin (role "_admin"), IsReplicator
// (ReplicatorRole) and IsSystem (both, as SystemUser). parse.UserCtx is
// the same type, so a user passes from a hook event to the replicator's
// parser as it is.
type UserCtx = couchuser.Ctx

// ReplicatorRole is the role carried by the host's own writes on behalf of a
// plugin; a plugin recognises it and skips validating its own state updates.
const ReplicatorRole = couchuser.ReplicatorRole

// SystemUser returns the context of the host's own writes on behalf of a
// plugin: a server admin with CouchDB's "_replicator" role, as CouchDB's
// replicator writes its docs; the replicator skips validation for it.
func SystemUser() UserCtx {
	return UserCtx{Name: "", Roles: []string{"_admin", ReplicatorRole}}
}

// Error is a CouchDB-shaped error: HTTP status + {"error":…, "reason":…}.
type Error struct {
	Status int    // HTTP status code, e.g. 403
	Err    string // the "error" member, e.g. "forbidden"
	Reason string // the "reason" member, shown to the user as-is
}

// Error formats e as "status error: reason".
func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Err, e.Reason)
}

// MarshalJSON encodes e as CouchDB's error body {"error":…,"reason":…}.
func (e *Error) MarshalJSON() ([]byte, error) {
	var o jsonobj.Builder
	return o.Add("error", e.Err).Add("reason", e.Reason).Raw(), nil
}

// Forbidden returns CouchDB's 403 {"error":"forbidden","reason":reason}.
func Forbidden(reason string) *Error {
	return &Error{Status: 403, Err: "forbidden", Reason: reason}
}

// NotFound returns CouchDB's 404 {"error":"not_found","reason":reason}.
func NotFound(reason string) *Error {
	return &Error{Status: 404, Err: "not_found", Reason: reason}
}

// Conflict returns CouchDB's 409 {"error":"conflict","reason":"Document update conflict."}.
func Conflict() *Error {
	return &Error{Status: 409, Err: "conflict", Reason: "Document update conflict."}
}

// ServiceUnavailable returns a 503 {"error":"service_unavailable","reason":reason}.
func ServiceUnavailable(reason string) *Error {
	return &Error{Status: 503, Err: "service_unavailable", Reason: reason}
}

// Subscription declares interest in one hook for dbs matching DB: an exact
// name ("_replicator") or a pattern where "*" matches any run of characters
// including "/" ("*/_replicator" matches "a/_replicator" and "a/b/_replicator";
// "*" matches every db).
type Subscription struct {
	Hook Hook   // the hook subscribed to
	DB   string // db name or pattern
}

// Matches reports whether the db name matches the subscription's DB pattern.
func (s Subscription) Matches(db string) bool { return MatchDB(s.DB, db) }

// MatchDB reports whether db matches pattern, where "*" matches any run of
// characters (including none and "/"); other characters match themselves.
func MatchDB(pattern, db string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == db
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(db, parts[0]) {
		return false
	}
	db = db[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(db, p)
		if i < 0 {
			return false
		}
		db = db[i+len(p):]
	}
	return strings.HasSuffix(db, last)
}

// Route declares an HTTP route a plugin serves. Path is exact ("/_replicate")
// or a prefix ending in "/*" ("/_scheduler/jobs/*" matches "/_scheduler/jobs"
// and everything below it); Method "" matches any method, and "GET" matches
// HEAD too, as CouchDB and net/http's ServeMux answer HEAD wherever they
// answer GET (clients probe endpoints with it: kivik asks HEAD
// /_scheduler/jobs to learn whether the server has the scheduler).
type Route struct {
	Method string // HTTP method, or "" for any
	Path   string // escaped path: exact, or a prefix ending in "/*"
}

// Matches reports whether a request with method and escaped path is served by r.
func (r Route) Matches(method, path string) bool {
	if r.Method != "" && r.Method != method && !(r.Method == http.MethodGet && method == http.MethodHead) {
		return false
	}
	if prefix, ok := strings.CutSuffix(r.Path, "/*"); ok {
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	return r.Path == path
}

// PluginInfo is what a plugin declares at handshake: its name and version,
// the hooks it subscribes to and the HTTP routes it serves.
type PluginInfo struct {
	Name          string         // the plugin's name, unique in a server (e.g. "replicator")
	Version       string         // shown by the server's plugin listing
	Subscriptions []Subscription // hooks and the dbs they apply to
	Routes        []Route        // HTTP endpoints the plugin serves
}

// DocWrite is an after_doc_write event. Doc is the winning revision's JSON
// body including _id and _rev.
type DocWrite struct {
	DB      string // db name
	DBUUID  string // the db's uuid: tells a re-created db from the old one
	DocID   string // document id
	Rev     string // the winning revision after the write
	Seq     string // the db's update sequence of the write, as _changes shows it
	Deleted bool   // the winning revision is a deletion
	Doc     []byte // the winning revision's JSON body
}

// Change is one row of a _changes feed (style=all_docs: Revs are the leaf revs).
type Change struct {
	Seq     string   // the row's update sequence
	ID      string   // document id
	Revs    []string // leaf revisions
	Deleted bool     // the winning revision is a deletion
}

// ChangesPage is one page of a db's changes feed.
type ChangesPage struct {
	Results []Change // rows in sequence order
	LastSeq string   // the sequence to pass as since for the next page
	Pending int64    // changes left after LastSeq
}

// DBInfo names a db and its identity.
type DBInfo struct {
	Name      string // db name
	UUID      string // the db's uuid, new for every creation of the name
	UpdateSeq string // the db's current update sequence
}

// ServerInfo describes the server a plugin runs in. UUID is the [couchdb]
// uuid (32 hex), Node e.g. "nonode@nohost", URL the server's base URL for
// local endpoints, e.g. "http://127.0.0.1:5984/".
type ServerInfo struct {
	UUID    string // [couchdb] uuid
	Version string // CouchDB version the server reports, e.g. "3.5.0"
	Vendor  string // vendor name of `GET /`
	Node    string // node name
	URL     string // base URL for local endpoints
}

// Config is a server's ini configuration: section -> key -> value.
type Config map[string]map[string]string

// Get returns the value of key in section, or def when unset.
func (c Config) Get(section, key, def string) string {
	if v, ok := c[section][key]; ok {
		return v
	}
	return def
}

// Services is what a server does for plugins (implemented by the server,
// called by plugins through the host).
type Services interface {
	// ServerInfo describes the server.
	ServerInfo(ctx context.Context) (ServerInfo, error)
	// ListDBs lists every db.
	ListDBs(ctx context.Context) ([]DBInfo, error)
	// Changes reads a db's changes feed: since "" or "0" = from start;
	// all_docs style; never _local docs; at most limit rows (0 = no limit).
	Changes(ctx context.Context, db, since string, limit int) (ChangesPage, error)
	// GetDoc reads a doc's winning revision; *Error 404 not_found if missing or deleted.
	GetDoc(ctx context.Context, db, docID string) ([]byte, error)
	// UpdateDoc writes doc as SystemUser() (before_doc_update still runs with
	// that ctx); returns the new rev or *Error 409 conflict.
	UpdateDoc(ctx context.Context, db string, doc []byte) (rev string, err error)
}
