package store

import (
	"strings"
	"sync/atomic"
)

// Counters are the store's operation counts since it was opened, as
// CouchDB's couchdb.* stats count them.
type Counters struct {
	DatabaseReads       uint64 // documents read (couchdb.database_reads)
	DatabaseWrites      uint64 // commits that changed a database (couchdb.database_writes)
	DocumentWrites      uint64 // document revisions written (couchdb.document_writes)
	DocumentInserts     uint64 // documents created: first revisions (couchdb.document_inserts)
	LocalDocumentWrites uint64 // _local document writes (couchdb.local_document_writes)
}

// counters holds the live Counters.
type counters struct {
	reads, writes, docWrites, inserts, localWrites atomic.Uint64
}

// Counters returns the store's operation counts.
func (s *Store) Counters() Counters {
	c := &s.counters
	return Counters{DatabaseReads: c.reads.Load(), DatabaseWrites: c.writes.Load(), DocumentWrites: c.docWrites.Load(),
		DocumentInserts: c.inserts.Load(), LocalDocumentWrites: c.localWrites.Load()}
}

// countWrites counts the successful results of one committed write.
func (c *counters) countWrites(res []BulkResult) {
	changed := false
	for _, r := range res {
		switch {
		case r.Err != nil:
		case strings.HasPrefix(r.ID, LocalPrefix):
			c.localWrites.Add(1)
		default:
			changed = true
			c.docWrites.Add(1)
			if strings.HasPrefix(r.Rev, "1-") {
				c.inserts.Add(1)
			}
		}
	}
	if changed {
		c.writes.Add(1)
	}
}
