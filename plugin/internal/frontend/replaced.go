package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// A doc edit that changes a replication (a new target, new credentials,
// other options) or deletes its doc must stop the old run before the write
// is acknowledged, as CouchDB's doc processor does: after_doc_write, which
// replaces the job, arrives after the acknowledgement, and until it did the
// old run would go on writing to the old target. So before_doc_update
// holds the job (jobs.Tx.Hold): its run is taken from whichever node runs
// it, and the write waits until that node has stopped it. The job waits in
// the queue, unchanged, for the doc's after_doc_write to replace or remove
// it; if the write fails after all (a conflict), it runs again after
// holdFor, from its last checkpoint.

// holdWait bounds how long a doc write waits for the old run to stop. A
// node that does not answer within it is no longer valid to write anyway
// once half its lease's TTL has passed (jobs.Queue.WaitHalted).
const holdWait = 3 * time.Second

// holdFor is how long a held job stays out of the pending queue when the
// write that held it does not replace it.
const holdFor = time.Minute

// StopReplaced stops the run of the job that doc, about to be written to
// replicator db, replaces or removes, and returns once that run writes
// nothing more (or holdWait passed). A doc whose replication is the job's
// (an edit of other fields) leaves the job running. It never refuses the
// write: a failure is logged, and the job is then replaced when the write
// is processed, as before.
func (f *Frontend) StopReplaced(ctx context.Context, db string, doc []byte) {
	if !jobdata.IsReplicatorDB(db) {
		return
	}
	c, create, ok := pendingChange(db, doc)
	if !ok || create {
		// A create (no revision named) has no run to stop: either the
		// doc does not exist, or it was deleted, and that delete's write
		// stopped its run. So a new doc costs no read of the queue,
		// which on etcd is a linearizable round trip the write waits
		// for (#39).
		return
	}
	wctx, cancel := context.WithTimeout(ctx, holdWait)
	defer cancel()
	var h jobs.Halt
	var jobID string
	err := f.cfg.Queue.Transact(wctx, func(tx *jobs.Tx) error {
		h, jobID = jobs.Halt{}, ""
		// The write waits for this: one request for the db's position
		// and the doc's job under the db's uuid last seen, instead of
		// one after the other (#39).
		if uuid, ok := f.dbUUIDs.Load(db); ok {
			if err := tx.PrefetchJobs(jobdata.JobType, []string{parse.PersistentJobID(uuid.(string), c.docID)}, jobstore.DBSeqKey(db)); err != nil {
				return err
			}
		}
		pos, err := jobstore.GetDBSeq(tx.KV(), db)
		if err != nil || pos.UUID == "" {
			return err // a db whose docs have no jobs yet
		}
		f.dbUUIDs.Store(db, pos.UUID)
		c.uuid = pos.UUID
		jobID = parse.PersistentJobID(pos.UUID, c.docID)
		cur, err := jobstore.Get(tx, f.cfg.Keys, jobID)
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			return nil
		case errors.Is(err, jobstore.ErrUndecodable):
			// Not readable here: it is replaced all the same.
		case err != nil:
			return err
		case !cur.Active():
			return nil
		default:
			next, skip, _ := docRecord(c, f.options(), f.cfg.Now())
			if skip || next != nil && cur.Rep != nil && next.Rep != nil && cur.Rep.Equal(next.Rep) {
				return nil // the job stays as it is (jobstore.PutEncoded)
			}
		}
		h, err = tx.Hold(jobdata.JobType, jobID, f.cfg.Now().Add(holdFor))
		return err
	})
	if err != nil {
		f.log.Warn("could not stop the old run of an edited replication doc before the write; it stops when the write is processed", "db", db, "doc_id", c.docID, "error", err)
		return
	}
	if !h.Held() {
		return
	}
	f.counts.runsStoppedForEdit.Add(1)
	if err := f.cfg.Queue.WaitHalted(wctx, h); err != nil {
		f.log.Warn("the node running an edited replication doc's job did not confirm it stopped", "db", db, "doc_id", c.docID, "job", jobID, "error", err)
	}
}

// pendingChange is the doc change a doc about to be written will be, for
// docs that may have a job (not design or local docs); ok is false for the
// others, and for a doc without an id. create reports a doc that names no
// revision (the hook's doc carries the one a request names anywhere, as
// CouchDB's does).
func pendingChange(db string, doc []byte) (c docChange, create, ok bool) {
	var d struct {
		ID      string          `json:"_id"`
		Rev     string          `json:"_rev"`
		Deleted json.RawMessage `json:"_deleted"`
	}
	if json.Unmarshal(doc, &d) != nil || d.ID == "" {
		return c, false, false
	}
	if strings.HasPrefix(d.ID, "_design/") || strings.HasPrefix(d.ID, "_local/") {
		return c, false, false
	}
	c.db, c.docID, c.body = db, d.ID, doc
	c.deleted = string(d.Deleted) == "true" // only true deletes, as in CouchDB
	return c, d.Rev == "", true
}
