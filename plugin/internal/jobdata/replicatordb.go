package jobdata

import "strings"

// ReplicatorDBPatterns are the db name patterns of replicator dbs, as the
// plugin subscribes to them: `_replicator` and any `<prefix>/_replicator`.
func ReplicatorDBPatterns() []string { return []string{"_replicator", "*/_replicator"} }

// IsReplicatorDB reports whether db is a replicator db, that is whether it
// matches ReplicatorDBPatterns.
func IsReplicatorDB(db string) bool {
	return db == "_replicator" || strings.HasSuffix(db, "/_replicator")
}
