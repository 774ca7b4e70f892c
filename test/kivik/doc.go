// Package kivik holds a round trip through minicouch with kivik, the Go
// ecosystem's CouchDB client (github.com/go-kivik/kivik/v4): its test
// creates a database, writes documents and an attachment with kivik's
// gzip-encoded request bodies, reads them back, creates a Mango index and
// queries _find through it, reads _changes, and replicates through the
// replicator plugin.
package kivik
