// Package e2e holds the replicator's end-to-end tests and benchmarks:
// minicouch servers started by the tests, with bin/replicator loaded as a
// real go-plugin process, driven over HTTP as a CouchDB client would (one
// node, shared-queue clusters on etcd, live swaps, trust and validation).
// It has no code of its own.
package e2e
