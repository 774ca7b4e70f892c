package jobstore

import (
	"encoding/json"
	"strconv"

	"github.com/couchepi/couchepi/plugin/kv"
)

// The plugin's layout in its KV store: the jobs queue lives under
// QueuePrefix; the replicator's own keys (rep-id ownership index, last
// processed seq per replicator db) under ownPrefix, in the same store so
// that they change in the same transactions as the jobs.
const (
	// QueuePrefix is the jobs.Options.Prefix of the replicator's queue.
	QueuePrefix = "j/"
	ownPrefix   = "r/"
	repIDSpace  = ownPrefix + "repid/"
	dbSeqSpace  = ownPrefix + "dbseq/"
	doneSpace   = ownPrefix + "tdone/"
	sealKey     = ownPrefix + "seal"
)

// SealState is what the queue records about how its job records are
// sealed (see Reseal).
type SealState struct {
	// Key is the id of the key records are sealed with: every process
	// sharing the queue must hold it. "" in a new queue, or one written
	// before records were sealed.
	Key string `json:"key"`
	// Done is set once a Reseal with Key found no record left to seal.
	Done bool `json:"done"`
	// Bound is set with Done by versions whose Reseal also seals again
	// the records sealed without a binding (s1): a queue Done without it
	// gets one more pass.
	Bound bool `json:"bound,omitempty"`
	// Scrub is set when records were rewritten and the store's files may
	// still hold their old bytes, until the store is compacted.
	Scrub bool `json:"scrub"`
}

// GetSealState returns the queue's SealState (zero when none is stored).
func GetSealState(tx kv.ReadTx) (SealState, error) {
	var s SealState
	v, err := tx.Get([]byte(sealKey))
	if err != nil || v == nil {
		return s, err
	}
	err = json.Unmarshal(v, &s)
	return s, err
}

// SetSealState stores the queue's SealState.
func SetSealState(tx kv.Tx, s SealState) {
	b, _ := json.Marshal(s)
	tx.Set([]byte(sealKey), b)
}

// SetTransientDone records when a transient job finished, so old ones can
// be found without reading every job.
func SetTransientDone(tx kv.Tx, jobID string, at int64) {
	tx.Set([]byte(doneSpace+jobID), []byte(strconv.FormatInt(at, 10)))
}

// FinishedTransient returns the finished transient jobs and when they finished.
func FinishedTransient(tx kv.ReadTx) (map[string]int64, error) {
	out := map[string]int64{}
	begin := []byte(doneSpace)
	err := tx.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
		at, _ := strconv.ParseInt(string(v), 10, 64)
		out[string(k[len(begin):])] = at
		return nil
	})
	return out, err
}

// clearTransientDone forgets a transient job's finish time.
func clearTransientDone(tx kv.Tx, jobID string) { tx.Clear([]byte(doneSpace + jobID)) }

// RepIDOwner returns the id of the job that owns a replication id
// (CouchDB 4.x REPLICATION_IDS index), or "" if none.
func RepIDOwner(tx kv.ReadTx, repID string) (string, error) {
	v, err := tx.Get(RepIDOwnerKey(repID))
	return string(v), err
}

// RepIDOwnerKey is the key of repID's owner, for a read of it together
// with others (jobs.Tx.PrefetchHeld).
func RepIDOwnerKey(repID string) []byte { return []byte(repIDSpace + repID) }

// SetRepIDOwner records jobID as the owner of repID.
func SetRepIDOwner(tx kv.Tx, repID, jobID string) {
	tx.Set([]byte(repIDSpace+repID), []byte(jobID))
}

// ClearRepIDOwner removes repID's owner if it is jobID.
func ClearRepIDOwner(tx kv.Tx, repID, jobID string) error {
	if repID == "" {
		return nil
	}
	owner, err := RepIDOwner(tx, repID)
	if err != nil || owner != jobID {
		return err
	}
	tx.Clear([]byte(repIDSpace + repID))
	return nil
}

// DBSeq is where the frontend stands in one replicator db's changes feed.
type DBSeq struct {
	UUID string `json:"uuid"` // instance uuid of the db the seq belongs to
	Seq  string `json:"seq"`  // last processed seq
}

// DBSeqKey is the key of db's position, for a read of it together with
// others (jobs.Tx.PrefetchJobs).
func DBSeqKey(db string) []byte { return []byte(dbSeqSpace + db) }

// GetDBSeq returns the stored position for db (zero value if none).
func GetDBSeq(tx kv.ReadTx, db string) (DBSeq, error) {
	var s DBSeq
	v, err := tx.Get(DBSeqKey(db))
	if err != nil || v == nil {
		return s, err
	}
	err = json.Unmarshal(v, &s)
	return s, err
}

// SetDBSeq stores the position for db.
func SetDBSeq(tx kv.Tx, db string, s DBSeq) {
	b, _ := json.Marshal(s)
	tx.Set([]byte(dbSeqSpace+db), b)
}

// ClearDBSeq forgets db's position (the db was deleted).
func ClearDBSeq(tx kv.Tx, db string) { tx.Clear([]byte(dbSeqSpace + db)) }

// DBSeqs returns every stored position, by db name.
func DBSeqs(tx kv.ReadTx) (map[string]DBSeq, error) {
	out := map[string]DBSeq{}
	begin := []byte(dbSeqSpace)
	err := tx.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, v []byte) error {
		var s DBSeq
		if err := json.Unmarshal(v, &s); err != nil {
			return err
		}
		out[string(k[len(begin):])] = s
		return nil
	})
	return out, err
}
