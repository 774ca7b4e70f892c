package parse

import (
	"encoding/json"
	"strings"

	"github.com/couchepi/couchepi/internal/couchuser"
)

// UserCtx is the user context of the caller that wrote a replication doc or
// posted a replication: Name "" is anonymous and encodes as JSON null. It
// is hooks.UserCtx, named here through the internal package both share so
// that parse imports none of our public packages.
type UserCtx = couchuser.Ctx

// BasicAuth is the one basic-auth credential of an endpoint, after
// CouchDB's precedence rules (auth.basic > URL userinfo > Authorization header).
type BasicAuth struct {
	Username string `json:"username"`
	// Password is a secret: log Rep.Redacted or Endpoint.RedactedURL, never this.
	Password string `json:"password"`
}

// Endpoint is a normalised replication source or target.
// It is JSON-serialisable and round-trips without loss.
type Endpoint struct {
	// URL has no userinfo; a trailing "/" is appended unless it has "?".
	URL string `json:"url"`
	// Headers are the user's headers, minus the basic Authorization header
	// (whose credential moved to Auth).
	Headers map[string]string `json:"headers,omitempty"`
	// Auth is the basic credential, or nil.
	Auth *BasicAuth `json:"auth,omitempty"`
	// AuthOther holds the `auth` object's members other than "basic"
	// (other auth plugins' settings), passed through as a JSON object.
	AuthOther json.RawMessage `json:"auth_other,omitempty"`
	// Proxy is the proxy URL for this endpoint ("" = none).
	Proxy string `json:"proxy,omitempty"`
}

// RedactedURL is the endpoint URL as monitoring and logs show it.
// Endpoint URLs carry no userinfo, so this is the URL itself unless a
// password slipped into it, in which case it is replaced by "*****".
func (e Endpoint) RedactedURL() string { return RedactURL(e.URL) }

// RedactedProxy is the proxy URL with any password replaced by "*****",
// or "" when there is no proxy.
func (e Endpoint) RedactedProxy() string {
	if e.Proxy == "" {
		return ""
	}
	return RedactURL(e.Proxy)
}

// Rep is a parsed replication: a `_replicator` document or a
// `POST /_replicate` body, with config defaults applied. It is
// JSON-serialisable and round-trips without loss (it is stored in job data).
type Rep struct {
	// Source and Target are the endpoints, credentials separated from URLs.
	Source Endpoint `json:"source"`
	Target Endpoint `json:"target"`

	// Continuous, CreateTarget and Cancel are the request's flags of the
	// same names; Cancel is only meaningful in a POST /_replicate body.
	Continuous   bool `json:"continuous,omitempty"`
	CreateTarget bool `json:"create_target,omitempty"`
	Cancel       bool `json:"cancel,omitempty"`
	// CreateTargetParams is a JSON object (nil = {}).
	CreateTargetParams json.RawMessage `json:"create_target_params,omitempty"`

	// DocIDs are percent-decoded, sorted and deduplicated; nil = none.
	DocIDs []string `json:"doc_ids"`
	// Filter is "" (none), "_view", "_doc_ids" or another builtin, or "ddoc/name".
	Filter string `json:"filter,omitempty"`
	// QueryParams is a JSON object with key order preserved (it matters
	// for the replication id); nil = {}.
	QueryParams json.RawMessage `json:"query_params,omitempty"`
	// Selector is a JSON object, or nil.
	Selector json.RawMessage `json:"selector,omitempty"`
	// SinceSeq is any JSON value, or nil.
	SinceSeq json.RawMessage `json:"since_seq,omitempty"`
	// ID is the `_local_id`/`replication_id`/`id` alias used to cancel by id
	// (spaces turned back into "+").
	ID string `json:"id,omitempty"`

	// The per-replication options, each named by its JSON field; values
	// absent from the doc or body come from Options.
	UseCheckpoints     bool   `json:"use_checkpoints"`
	CheckpointInterval int    `json:"checkpoint_interval"` // ms
	WorkerProcesses    int    `json:"worker_processes"`
	WorkerBatchSize    int    `json:"worker_batch_size"`
	HTTPConnections    int    `json:"http_connections"`
	ConnectionTimeout  int    `json:"connection_timeout"` // ms
	RetriesPerRequest  int    `json:"retries_per_request"`
	SocketOptions      string `json:"socket_options,omitempty"`
	UseBulkGet         bool   `json:"use_bulk_get"`
	WinningRevsOnly    bool   `json:"winning_revs_only,omitempty"`
	// DocWriteFailure is couchepi's `doc_write_failure`: what a document
	// the target refuses does to the replication. "" counts it in
	// doc_write_failures and goes on (CouchDB's behaviour, the value
	// "count"); DocWriteFailureFail ends the run. It is not part of the
	// replication id: it changes what a run does, not where it
	// checkpoints.
	DocWriteFailure string `json:"doc_write_failure,omitempty"`
	// Checkpoint is where checkpoints are written (couchepi's, as
	// PouchDB's option): CheckpointBoth ("", CouchDB's: source and
	// target) or CheckpointTarget (the target alone, for sources the
	// replication may only read). It does not enter the replication id.
	Checkpoint string `json:"checkpoint,omitempty"`

	// UserCtx is who started it: the HTTP user for transient replications,
	// the doc's user_ctx (display only) for persistent ones.
	UserCtx UserCtx `json:"user_ctx"`
	// Owner is the doc's `owner` ("" = none/null).
	Owner string `json:"owner,omitempty"`
	// DB and DocID locate the replication doc of a persistent job;
	// both are "" for transient (POST /_replicate) replications.
	DB    string `json:"db,omitempty"`
	DocID string `json:"doc_id,omitempty"`
}

// Values of Rep.Checkpoint.
const (
	// CheckpointBoth writes checkpoints on the source and the target, as
	// CouchDB does ("both" in a doc, or no `checkpoint`).
	CheckpointBoth = ""
	// CheckpointTarget writes checkpoints on the target alone ("target").
	CheckpointTarget = "target"
)

// RepID is a CouchDB replication id: a 32-hex base and an extension.
type RepID struct {
	// Base is lowercase hex md5; it names the `_local/<Base>` checkpoint docs.
	Base string `json:"base"`
	// Ext is "", "+continuous", "+continuous+create_target" or "+create_target".
	Ext string `json:"ext"`
}

// String is the full replication id, Base+Ext.
func (id RepID) String() string { return id.Base + id.Ext }

// ParseRepID splits a replication id at its first "+" into Base and Ext,
// after turning spaces back into "+" (form decoding turns "+" into " ").
func ParseRepID(s string) RepID {
	s = strings.ReplaceAll(s, " ", "+")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		return RepID{Base: s[:i], Ext: s[i:]}
	}
	return RepID{Base: s}
}

// Values of `doc_write_failure` (couchepi's): what a document the target
// refuses (validate_doc_update, max_document_size, …) does to the
// replication.
const (
	// DocWriteFailureCount counts it in doc_write_failures and goes on,
	// as CouchDB does; it is the default, stored as "".
	DocWriteFailureCount = "count"
	// DocWriteFailureFail ends the run with a doc_write_failed error
	// naming the document; its checkpoint stays before it.
	DocWriteFailureFail = "fail"
)

// FailsOnDocWriteFailure reports whether a refused document ends the run
// (`doc_write_failure` is "fail").
func (r *Rep) FailsOnDocWriteFailure() bool { return r.DocWriteFailure == DocWriteFailureFail }

// Error is a validation error of a replication doc or body. It carries only
// the reason text; the HTTP status is the caller's choice (403 forbidden for
// doc writes, 400 bad_request for POST /_replicate).
type Error struct {
	Reason string
}

// Error returns the reason text.
func (e *Error) Error() string { return e.Reason }

// newError builds an *Error with a fixed reason.
func newError(reason string) *Error { return &Error{Reason: reason} }

// Options are the typed `[replicator]` config values that act as defaults
// for replication options, plus what POST /_replicate needs to rewrite bare
// database names into local endpoint URLs.
type Options struct {
	WorkerProcesses    int    // worker_processes, default 4
	WorkerBatchSize    int    // worker_batch_size, default 500
	HTTPConnections    int    // http_connections, default 20
	ConnectionTimeout  int    // connection_timeout in ms, default 30000
	RetriesPerRequest  int    // retries_per_request, default 5
	CheckpointInterval int    // checkpoint_interval in ms, default 30000
	UseCheckpoints     bool   // use_checkpoints, default true
	UseBulkGet         bool   // use_bulk_get, default true
	SocketOptions      string // socket_options, default "[{keepalive, true}, {nodelay, false}]"

	// DocWriteFailure is the default of `doc_write_failure` (couchepi's):
	// "" counts refused documents and goes on (CouchDB's behaviour),
	// DocWriteFailureFail ends the run at the first one.
	DocWriteFailure string

	// MaxDocumentIDLength is max_document_id_length in bytes: longer ids in
	// the source's changes feed are skipped and counted as doc_write_failures.
	// 0 is CouchDB's default, infinity (no limit).
	MaxDocumentIDLength int
	// RequestTimeout is request_timeout in ms, the overall deadline of each
	// request except _changes feeds; 0 is CouchDB's default, infinity.
	RequestTimeout int
	// MissingDocRetryMsec is missing_doc_retry_msec, the wait before a
	// revision the source or target unexpectedly lacks is fetched again;
	// 0 is the default, 2000.
	MissingDocRetryMsec int
	// MaxBatchesPerHost is max_batches_per_host (couchepi's): the most
	// batch writes (_revs_diff, _bulk_docs) the node's replications send
	// one target server at once, the others waiting their turn; 0 is the
	// default, 64, and -1 is "infinity" (no bound). Read it with
	// BatchesPerHost.
	MaxBatchesPerHost int
	// MaxRequestsPerHost is max_requests_per_host (couchepi's): the most
	// requests the node's replications have in flight to one server
	// (scheme, host and port), across jobs and endpoints; 0 is the
	// default, "infinity" (no bound but the server's own congestion
	// signals, see couchclient's host budgets).
	MaxRequestsPerHost int

	// VerifySSLCertificates is verify_ssl_certificates, default true: https
	// peers are verified unless it is false (CouchDB 3.x's default is false;
	// couchepi deliberately verifies, as credentials travel to the peers).
	VerifySSLCertificates bool
	// SSLTrustedCertificatesFile is ssl_trusted_certificates_file, a PEM CA
	// bundle ("" = the system's roots).
	SSLTrustedCertificatesFile string
	// SSLCertificateMaxDepth is ssl_certificate_max_depth: the most
	// intermediate certificates a verified peer chain may hold; nil is the
	// default, 3 (0 is a valid depth, so unset needs its own value). Read it
	// with CertificateMaxDepth.
	SSLCertificateMaxDepth *int
	// CertFile and KeyFile are cert_file and key_file, a PEM client
	// certificate and its key ("" = none).
	CertFile string
	KeyFile  string
	// Password is `password`, the passphrase of an encrypted KeyFile.
	// It is a secret: never log it.
	Password string
	// ConnectTo is connect_to: connection overrides, like curl's
	// --connect-to (see ParseConnectTo).
	ConnectTo []ConnectTo
	// Hosts is allowed_hosts and denied_networks: the hosts replications
	// of users who are not server admins may reach (see HostPolicy and
	// LimitsHosts); the zero value, the default, allows every host but
	// link-local and unspecified addresses.
	Hosts HostPolicy

	// LocalURL is the server's own base URL (e.g. "http://127.0.0.1:5984/");
	// POST /_replicate rewrites bare db names to LocalURL + url.PathEscape(name).
	// "" makes bare names invalid, as in `_replicator` docs.
	LocalURL string
	// LocalHeaders are copied into endpoints rewritten from bare db names:
	// the HTTP layer puts the request's Authorization and Cookie headers here.
	LocalHeaders map[string]string
}

// defaultSocketOptions is CouchDB's default `socket_options` value.
const defaultSocketOptions = "[{keepalive, true}, {nodelay, false}]"

// DefaultOptions returns CouchDB's built-in `[replicator]` defaults.
func DefaultOptions() Options {
	return Options{
		WorkerProcesses:       4,
		WorkerBatchSize:       500,
		HTTPConnections:       20,
		ConnectionTimeout:     30000,
		RetriesPerRequest:     5,
		CheckpointInterval:    30000,
		UseCheckpoints:        true,
		UseBulkGet:            true,
		SocketOptions:         defaultSocketOptions,
		VerifySSLCertificates: true,
	}
}

// Defaults of the `[replicator]` keys whose Options field is zero when unset.
const (
	// DefaultMissingDocRetryMsec is missing_doc_retry_msec's default.
	DefaultMissingDocRetryMsec = 2000
	// DefaultSSLCertificateMaxDepth is ssl_certificate_max_depth's default.
	DefaultSSLCertificateMaxDepth = 3
	// DefaultMaxBatchesPerHost is max_batches_per_host's default.
	DefaultMaxBatchesPerHost = 64
)

// BatchesPerHost is max_batches_per_host, the default when unset; 0 means
// no bound.
func (o Options) BatchesPerHost() int {
	switch {
	case o.MaxBatchesPerHost > 0:
		return o.MaxBatchesPerHost
	case o.MaxBatchesPerHost < 0:
		return 0
	}
	return DefaultMaxBatchesPerHost
}

// MissingDocRetry is missing_doc_retry_msec in ms, the default when unset.
func (o Options) MissingDocRetry() int {
	if o.MissingDocRetryMsec > 0 {
		return o.MissingDocRetryMsec
	}
	return DefaultMissingDocRetryMsec
}

// CertificateMaxDepth is ssl_certificate_max_depth, the default when unset.
func (o Options) CertificateMaxDepth() int {
	if o.SSLCertificateMaxDepth != nil {
		return *o.SSLCertificateMaxDepth
	}
	return DefaultSSLCertificateMaxDepth
}
