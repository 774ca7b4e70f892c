// Package etcd is a kv.Store on etcd (go.etcd.io/etcd/client/v3): the job
// queue's backend when many nodes share one queue. It is public with kv:
// a program that shares a jobs queue between nodes opens its store here.
//
// # Transactions
//
// A transaction reads at one etcd revision R (the revision of its first
// read), buffers its writes, and commits them in one etcd Txn whose
// compares prove that nothing it read has changed since R:
//
//   - a key read with Get (or AddReadConflictKey) must still have the
//     ModRevision it had at R (0 when absent), which catches updates,
//     inserts and deletes of that key;
//   - a range read must hold no key with ModRevision > R (a compare over
//     the range), which catches updates and inserts; deletes leave nothing
//     to compare, so every delete also writes a tombstone key in a shadow
//     range, and the same compare over the shadow range catches them.
//
// If any compare fails the commit writes nothing and Update retries the
// function at a new revision, so committed transactions are equivalent to
// running them one at a time in commit order: the store is serializable, as
// FoundationDB is. Snapshot ranges (kv.SnapshotTx) add no compare, so
// acceptors that scan the pending queue conflict only on the job they take.
//
// Tombstones are removed by a cleaner once they are older than the
// horizon: a revision stored in the store that only moves forward. Every
// commit that validates a range also checks horizon ≤ R, so a transaction
// whose tombstones may be gone fails and retries, as a FoundationDB
// transaction older than five seconds does (transaction_too_old).
//
// # Versionstamps
//
// etcd assigns a revision only at commit, so a transaction cannot learn it
// in advance. Versionstamps come from a counter key instead: a commit that
// takes one writes the counter plus one, under a compare on the counter's
// value, so versionstamps are unique and increase in commit order across
// all clients. Versionstamp hands out a random placeholder (as on
// FoundationDB), and the commit puts the stamp in its place in every key
// and value it writes. It does so once per counter value the commit may
// find: up to eight copies of its writes, each under "counter = n", nested
// so that etcd applies the first that holds (the stamp is chosen where
// etcd applies the commit, as a sequencer would). So commits of other
// clients that land between this client's last look at the counter and
// its commit do not make it fail; only when all its offers were taken
// does it run again, at the same read revision, reusing its reads and the
// counter value the failed commit read. The counter value a client last
// saw is trusted for 50 ms, then read again (serializably) before a
// commit. Commits with more than 32 KiB of writes offer one value.
//
// # Reads
//
// The first read of a transaction is linearizable and fixes R; later reads
// name R and are serializable (served by the member the client talks to,
// with no round of agreement), since every member that has applied R holds
// the same data at R; a member that has not answers ErrFutureRev and the
// read is sent again linearizably. etcd counts every key of a requested
// range even when a limit returns few, so a limited read of a big range
// costs in proportion to the range; keys-only ranges (RangeOptions.KeysOnly)
// are answered from etcd's in-memory index without reading values.
// SnapshotRanges (kv.BatchSnapshotTx) sends many range reads in one Txn
// of reads, which etcd serves as one read: the job queue's pick over many
// tags costs one round trip.
//
// # Limits and failures
//
// etcd refuses a Txn with more than 128 compares or operations (its
// --max-txn-ops default), counting nested Txns against their parents. So a
// commit holds at most 64 compares: past that, its reads are merged into a
// few covering ranges (which can only add conflicts, never miss one); and
// its writes are grouped into nested Txns, which etcd applies atomically
// with the rest. A commit larger than the server's request
// limit (--max-request-bytes, 1.5 MiB by default) or than a gRPC message
// (2 MiB) fails at once with ErrTooLarge, which is kv.ErrTooLarge.
//
// A commit whose outcome is unknown (connection lost, leader change, timeout
// after the request was sent) is resolved, never guessed: each commit also
// creates a unique marker key and requires it to be absent, so the store can
// later either find the marker (committed) or create it itself (which makes a
// late arrival of the lost request fail). Reads at a compacted revision and
// failed compares are conflicts and are retried; other errors are returned.
//
// # History
//
// etcd keeps every value a key had (its MVCC history) until it is
// compacted. The store compacts it itself every Config.CompactInterval,
// keeping one interval of it, one node at a time (compact.go): etcd's
// data file then stays about the same size under a steady load instead of
// growing with every job update.
//
// # Layout
//
// Under Config.Prefix: "d/" + key holds data, "t/" + key tombstones,
// "m/vs" the versionstamp counter, "m/horizon" the tombstone horizon,
// "m/compacted" the revision of the last compaction claim and
// "m/c/" + id the commit markers (on a lease that commits stop renewing
// after leaseTTL/2, so they expire a minute or so after their commit).
package etcd
