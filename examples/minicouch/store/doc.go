// Package store is minicouch's storage engine: every database of a server in
// one durable bbolt file (<data dir>/minicouch.db), with CouchDB 3.x document
// semantics — full revision trees with conflicts, tombstones, revs_limit
// stemming, _local documents, per-database update sequences, content-addressed
// attachments and the reads the replication protocol needs (_changes,
// _all_docs, _revs_diff, open_revs).
//
// # API notes for callers
//
// The HTTP layer validates database names, parses request bodies with
// ParseDoc, runs plugin hooks and formats responses; the store owns
// persistence and revision logic. Errors returned by the store are *Error
// values carrying CouchDB's HTTP status, error and reason strings.
//
// Sequences are uint64 (the HTTP layer formats them as strings). Every
// acknowledged write is fsynced (bbolt commit) before the method returns.
// Writes from concurrent callers are grouped into one commit (one fsync) by
// a single writer goroutine; a _bulk_docs request is one commit.
//
// Iterations (Changes, AllDocs, LocalDocs) read in batches of 1000 rows
// per read transaction and call the callback between transactions, so a
// slow consumer (a continuous feed) never holds a transaction open.
//
// API changes since the first published version (additions only):
// BulkResult.Seq, AllDocsOptions.Start.
//
// # Layout in the bbolt file
//
//	dbs/<name>/meta    uuid, counters, _security, revs_limit
//	dbs/<name>/docs    doc id  -> flags byte + encoded revision tree + seq
//	dbs/<name>/seqs    seq(8 bytes BE) -> doc id (one entry per doc, at its latest seq)
//	dbs/<name>/revs    doc id 0x00 rev -> stored revision body
//	dbs/<name>/local   _local doc id -> rev + body
//	dbs/<name>/atts    "md5-<b64>" digest -> attachment blob header
//	dbs/<name>/blobs   blob id(8) chunk(4) -> up to 256 KiB of attachment data
//
// Attachments are stored once per digest per database. Blobs no longer
// referenced by any stored revision are reclaimed by DB.Compact (and all of a
// database's data goes when it is deleted).
//
// # Revision ids
//
// A new edit gets the id <gen>-<md5 hex> that CouchDB 3.x gives the same
// edit: the md5 of the Erlang external term format of [Deleted, parent
// generation, parent id, body as jiffy decodes it, {name, content type,
// md5} of each attachment in reverse order] (see couchRevHash). Since
// attachment digests are CouchDB's too (compressible attachments are
// gzipped with zlib, as CouchDB gzips them), a document written to
// minicouch and to CouchDB gets the same revision ids, and the same edit
// of the same parent always yields the same rev. Attachments keep
// CouchDB's order, which the id depends on.
//
// # Ordering
//
// _all_docs orders ids by raw byte order of their UTF-8 bytes, which is
// what CouchDB does for _all_docs too ("raw" Erlang binary comparison; only
// views use ICU collation).
package store
