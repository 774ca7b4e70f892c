// Package parse turns CouchDB replication requests into typed replications
// and computes their identities, without any network access. It is the one
// parser couchepi uses at write time (before_doc_update), when a replication
// doc becomes a job, and for POST /_replicate. It is public so that a server
// can validate replication docs, or compute a replication's id, as the
// replicator will, without loading it.
//
// # API
//
//   - ReplicationDoc parses a `_replicator` document body, ReplicateRequest a
//     POST /_replicate body, into a *Rep: normalised endpoints (URL without
//     userinfo and with CouchDB's trailing-slash rule; exactly one basic
//     credential in Endpoint.Auth after the precedence auth.basic > URL
//     userinfo > "Authorization: Basic" header), options with `[replicator]`
//     defaults from Options (DefaultOptions, OptionsFromConfig), the filter,
//     doc ids (percent-decoded, sorted, deduplicated), selector, query params
//     (key order kept) and since_seq. A Rep round-trips through JSON without
//     loss, so it can be stored as job data. Rep.Equal says whether a doc
//     update changes the replication; Rep.Redacted is safe to log.
//   - Errors are *Error values carrying CouchDB's reason text; the caller
//     picks the status (403 forbidden for doc writes, 400 bad_request for
//     POST /_replicate).
//   - ReplicationID computes CouchDB 3.x's version-4 replication id (md5 of
//     the Erlang External Term Format encoding of the id parts), matching
//     ids computed by CouchDB 3.5.0, so checkpoints are shared with CouchDB.
//     For "ddoc/name" filters the caller fetches the filter source and
//     passes it in. PersistentJobID and TransientJobID name jobs (4.x style).
//   - BeforeDocUpdate applies CouchDB's write-time rules for replicator
//     databases (owner handling, then validation); StripCredentials is the
//     after_doc_read rule hiding credentials from non-owners; RedactURL and
//     Endpoint.RedactedURL give what monitoring shows.
//
// # Deliberate differences from CouchDB
//
//   - Reasons are CouchDB 4.x's clean sentences (e.g. "`continuous` must be
//     a boolean", "Missing `source` field") rather than 3.x's printed
//     Erlang terms; where CouchDB crashes (object endpoint without `url`,
//     non-string header values, malformed `user_ctx`, bad selectors) this
//     package gives its own readable sentence.
//   - Values CouchDB accepts but cannot use are rejected: worker_processes,
//     worker_batch_size, http_connections, connection_timeout and
//     checkpoint_interval must be integers ≥ 1, retries_per_request ≥ 0
//     (numeric strings such as "4" are accepted as in CouchDB);
//     use_checkpoints, use_bulk_get and winning_revs_only must be booleans
//     (3.x accepts anything for use_checkpoints); doc_ids must be non-empty
//     strings (4.x rule) that percent-decode to UTF-8; a "ddoc/name" filter
//     and the `_view` filter's view must have non-empty parts; selectors are
//     validated as Mango does (unknown operators, wrong argument types,
//     a `$regex` that does not compile), a `$regex` with Go's regexp (RE2,
//     what minicouch evaluates it with) where CouchDB uses PCRE.
//   - Bare database names are refused in documents ("Local endpoints are
//     not supported: …"); a URL with another scheme, such as a typo like
//     htp://, says so ("`source` must be an http:// or https:// URL, not
//     htp://") in documents and _replicate bodies alike; an unparseable URL
//     gives "`source` has an invalid url". The http/https scheme is
//     recognised case-insensitively.
//   - In documents, `_local_id`/`replication_id`/`id` and `cancel` have no
//     effect (cancel is only type-checked): a doc is cancelled by deleting
//     it. Only ReplicateRequest honours `{"cancel":true,"replication_id":…}`
//     without source and target.
//   - BeforeDocUpdate also refuses, for non-admins, a `user_ctx` naming
//     another user ("The given `user_ctx.name` is not valid") or a role the
//     writer lacks ("Invalid role (`r`) in the `user_ctx`"), as CouchDB's
//     old replicator validate_doc_update did.
//   - StripCredentials also strips passwords from `proxy`, `source_proxy` and
//     `target_proxy`; it returns a doc unchanged when it holds no credentials,
//     and its fake revision is "<same generation>-<md5 of stripped body>"
//     (CouchDB derives a new revision from the parent revision).
//   - POST /_replicate: a bare name given as an object endpoint's `url` keeps
//     the object's own headers and auth (CouchDB replaces the whole object);
//     opts.LocalHeaders are added under them.
//   - A URL userinfo without a password ("http://user@host/db") is removed
//     and gives no credential.
//   - TransientJobID follows CouchDB 4.x's shape but is only meant to be
//     stable within couchepi.
//   - `checkpoint` (PouchDB's option, which CouchDB ignores) is read:
//     "target" keeps checkpoints on the target alone (Rep.Checkpoint),
//     "both" or null is the default; other values are refused. It does
//     not enter the replication id.
//
// couchepi adds one option: `doc_write_failure`, "count" (the default, as
// CouchDB: a document the target refuses is counted in doc_write_failures)
// or "fail" (the run ends with doc_write_failed), with a `[replicator]`
// default (Options.DocWriteFailure). It does not enter the replication id.
//
// `since_seq` and `winning_revs_only` change the replication id, as in
// CouchDB 3.5.2 (3.5.0 left since_seq out).
package parse
