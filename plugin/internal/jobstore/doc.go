// Package jobstore keeps the replicator's job records (package jobdata) in
// its jobs queue: where they live in the KV store, reading, adding and
// removing them with the replication id index, the per-db positions of
// the frontend, re-sealing, the size a record may be added with, and the
// terminal states written back into replication docs.
package jobstore
