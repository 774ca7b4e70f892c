// Package fdb is the FoundationDB backend of kv.Store, public with kv for
// programs that keep a jobs queue in FoundationDB. It is only built with
// the build tag fdb (it needs libfdb_c and its headers):
//
//	go test -tags fdb ./plugin/kv/fdb/   # with FDB_CLUSTER_FILE set
//
// Without the tag this package is empty, so `go build ./...` needs no
// FoundationDB client library.
package fdb
