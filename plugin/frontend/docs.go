package frontend

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/jobdata"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// changesPage is how many changes catch-up reads per request.
const changesPage = 500

// docChange is one version of a replication doc to process.
type docChange struct {
	db, uuid, docID, seq string
	deleted              bool
	body                 []byte
}

// maxBatch is how many doc changes of one db are applied in one transaction.
const maxBatch = 1000

// AfterDocWrites applies writes to one replicator db, in order, in
// transactions of at most maxBatch changes; the db's processed seq advances
// in the same transaction as its jobs. The host delivers one batch at a
// time and counts it delivered when this returns, so the frontend keeps no
// queue of its own: on an error the host asks for CatchUp from the last
// stored seq. lockDB orders it against catch-ups started by the plugin.
func (f *Frontend) AfterDocWrites(ctx context.Context, db string, evs []hooks.DocWrite) error {
	if !jobdata.IsReplicatorDB(db) || len(evs) == 0 {
		return nil
	}
	unlock := f.lockDB(db)
	defer unlock()
	for start := 0; start < len(evs); start += maxBatch {
		part := evs[start:min(start+maxBatch, len(evs))]
		batch := make([]docChange, len(part))
		for i, ev := range part {
			batch[i] = docChange{db: ev.DB, uuid: ev.DBUUID, docID: ev.DocID, seq: ev.Seq, deleted: ev.Deleted, body: ev.Doc}
		}
		end := batch[len(batch)-1]
		if err := f.apply(ctx, db, jobdata.DBSeq{UUID: end.uuid, Seq: end.seq}, batch); err != nil {
			return err
		}
	}
	return nil
}

// AfterDocWrite is AfterDocWrites for one write.
func (f *Frontend) AfterDocWrite(ctx context.Context, ev hooks.DocWrite) error {
	return f.AfterDocWrites(ctx, ev.DB, []hooks.DocWrite{ev})
}

// planned is a doc change with its parse done: the record of the job to
// add (nil = remove the job), or skip (nothing to do for this doc).
type planned struct {
	jobID string
	docID string
	fresh *jobdata.Record
	skip  bool
	// stripState: the doc is in a legacy state ("triggered", "error")
	// whose fields CouchDB 3.x removes before running it.
	stripState bool
}

// plan parses one doc version (CouchDB 4.x couch_replicator
// after_doc_write): design docs and docs in a terminal state are skipped;
// a deleted doc removes its job; a doc that does not parse (it bypassed
// before_doc_update, e.g. by a restore) becomes a job in state failed so
// `_scheduler/docs` shows why.
func (f *Frontend) plan(c docChange) planned {
	p := planned{jobID: parse.PersistentJobID(c.uuid, c.docID), docID: c.docID}
	if strings.HasPrefix(c.docID, "_design/") || strings.HasPrefix(c.docID, "_local/") {
		p.skip = true
		return p
	}
	if c.deleted {
		return p
	}
	rep, state, err := parse.ReplicationDocState(c.body, parse.UserCtx{}, f.options())
	switch state {
	case jobdata.Completed, jobdata.Failed:
		p.skip = true
		return p
	case "triggered", "error":
		p.stripState = true
	}
	now := f.cfg.Now()
	if err != nil {
		var pe *parse.Error
		reason := err.Error()
		if errors.As(err, &pe) {
			reason = pe.Reason
		}
		p.fresh = jobdata.NewFailed(c.db, c.uuid, c.docID, reason, now)
		return p
	}
	rep.DB, rep.DocID = c.db, c.docID
	p.fresh = jobdata.New(rep, c.db, c.uuid, c.docID, now)
	return p
}

// apply applies doc changes of one db in one transaction and records pos
// as the db's position (unless its seq is ""): a doc whose parsed replication equals that of its
// pending/running job changes nothing; otherwise the job is replaced by a
// fresh one. Only the last change of each doc in the batch counts.
func (f *Frontend) apply(ctx context.Context, db string, pos jobdata.DBSeq, batch []docChange) error {
	last := map[string]int{}
	for i, c := range batch {
		last[c.docID] = i
	}
	var plans []planned
	for i, c := range batch {
		if last[c.docID] == i {
			plans = append(plans, f.plan(c))
		}
	}
	err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		for _, p := range plans {
			if err := f.applyOne(tx, p); err != nil {
				return err
			}
		}
		if pos.Seq != "" {
			jobdata.SetDBSeq(tx.KV(), db, pos)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range plans {
		switch {
		case p.skip:
		case p.fresh == nil:
			counts.jobsRemoved.Add(1)
		default:
			counts.jobsAdded.Add(1)
		}
	}
	for _, p := range plans {
		if p.fresh == nil && !p.skip && f.cfg.StopJob != nil {
			// A deleted doc: stop its worker now rather than at its next
			// update, checkpointing the work done.
			jobID := p.jobID
			go func() {
				if err := f.cfg.StopJob(context.Background(), jobID); err != nil {
					f.log.Warn("stopping the job of a deleted doc failed", "job", jobID, "error", err)
				}
			}()
		}
		if p.stripState && f.cfg.Services != nil {
			docID := p.docID
			go func() {
				if err := jobdata.WriteDocState(context.Background(), f.cfg.Services, db, docID, jobdata.DocState{}); err != nil {
					f.log.Warn("removing legacy state fields failed", "db", db, "doc", docID, "error", err)
				}
			}()
		}
	}
	return nil
}

// applyOne makes the job of one doc match its plan, inside tx.
func (f *Frontend) applyOne(tx *jobs.Tx, p planned) error {
	if p.skip {
		return nil
	}
	if p.fresh == nil { // deleted
		return jobdata.Remove(tx, p.jobID)
	}
	return jobdata.Put(tx, f.cfg.Keys, p.jobID, p.fresh)
}

// CatchUp re-reads a replicator db's changes feed from the last processed
// seq and applies every change, so writes whose events were dropped are
// not missed. A db that no longer exists has its jobs removed; a db that
// was re-created (new uuid) is read from the start and the old instance's
// jobs are removed.
func (f *Frontend) CatchUp(ctx context.Context, db string) error {
	if !jobdata.IsReplicatorDB(db) {
		return nil
	}
	dbs, err := f.cfg.Services.ListDBs(ctx)
	if err != nil {
		return err
	}
	uuid := ""
	for _, d := range dbs {
		if d.Name == db {
			uuid = d.UUID
		}
	}
	return f.catchUp(ctx, db, uuid)
}

// catchUp is CatchUp for a db whose current uuid is known ("" = gone).
func (f *Frontend) catchUp(ctx context.Context, db, uuid string) error {
	unlock := f.lockDB(db)
	defer unlock()
	var pos jobdata.DBSeq
	err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		var err error
		pos, err = jobdata.GetDBSeq(tx.KV(), db)
		return err
	})
	if err != nil {
		return err
	}
	if pos.UUID != "" && pos.UUID != uuid {
		if err := f.removeDBJobs(ctx, db, pos.UUID); err != nil {
			return err
		}
		pos = jobdata.DBSeq{}
	}
	if uuid == "" {
		return nil
	}
	since := pos.Seq
	if since == "" {
		counts.dbScans.Add(1)
	}
	for {
		page, err := f.cfg.Services.Changes(ctx, db, since, changesPage)
		if err != nil {
			return fmt.Errorf("catch-up of %s: %w", db, err)
		}
		var batch []docChange
		for _, ch := range page.Results {
			c := docChange{db: db, uuid: uuid, docID: ch.ID, seq: ch.Seq, deleted: ch.Deleted}
			if !c.deleted && !strings.HasPrefix(ch.ID, "_design/") {
				body, err := f.cfg.Services.GetDoc(ctx, db, ch.ID)
				var he *hooks.Error
				switch {
				case errors.As(err, &he) && he.Status == 404:
					c.deleted = true
				case err != nil:
					return fmt.Errorf("catch-up of %s: %w", db, err)
				}
				c.body = body
			}
			batch = append(batch, c)
		}
		if page.LastSeq != "" && page.LastSeq != since {
			since = page.LastSeq
		}
		if err := f.apply(ctx, db, jobdata.DBSeq{UUID: uuid, Seq: since}, batch); err != nil {
			return err
		}
		if len(page.Results) == 0 || page.Pending <= 0 {
			return nil
		}
	}
}

// AfterDBCreate scans a replicator db that was created or restored.
func (f *Frontend) AfterDBCreate(ctx context.Context, db, uuid string) error {
	if !jobdata.IsReplicatorDB(db) {
		return nil
	}
	return f.catchUp(ctx, db, uuid)
}

// AfterDBDelete removes every job of a deleted replicator db.
func (f *Frontend) AfterDBDelete(ctx context.Context, db, uuid string) error {
	if !jobdata.IsReplicatorDB(db) {
		return nil
	}
	unlock := f.lockDB(db)
	defer unlock()
	return f.removeDBJobs(ctx, db, uuid)
}

// removeDBJobs removes the jobs of one db instance and forgets its seq.
func (f *Frontend) removeDBJobs(ctx context.Context, db, uuid string) error {
	var ids []string
	err := f.recs.Fold(ctx, func(jobID string, rec *jobdata.Record) error {
		if !rec.Transient() && rec.DBUUID == uuid {
			ids = append(ids, jobID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for start := 0; start < len(ids) || start == 0; start += 500 {
		batch := ids[start:min(start+500, len(ids))]
		last := start+500 >= len(ids)
		if err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
			for _, id := range batch {
				if err := jobdata.Remove(tx, id); err != nil {
					return err
				}
			}
			if last {
				if pos, err := jobdata.GetDBSeq(tx.KV(), db); err == nil && pos.UUID == uuid {
					jobdata.ClearDBSeq(tx.KV(), db)
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	f.log.Info("replicator db gone, jobs removed", "db", db, "jobs", len(ids))
	return nil
}

// StartCatchUp runs at plugin start: every replicator db is caught up from
// its last processed seq, and jobs of replicator dbs that disappeared while
// the plugin was down are removed.
func (f *Frontend) StartCatchUp(ctx context.Context) error {
	dbs, err := f.cfg.Services.ListDBs(ctx)
	if err != nil {
		return err
	}
	live := map[string]string{}
	for _, d := range dbs {
		if jobdata.IsReplicatorDB(d.Name) {
			live[d.Name] = d.UUID
		}
	}
	known, err := f.dbSeqs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for db := range known {
		if _, ok := live[db]; !ok {
			errs = append(errs, f.catchUp(ctx, db, ""))
		}
	}
	for db, uuid := range live {
		errs = append(errs, f.catchUp(ctx, db, uuid))
	}
	return errors.Join(errs...)
}

// dbSeqs returns the processed position of every replicator db.
func (f *Frontend) dbSeqs(ctx context.Context) (map[string]jobdata.DBSeq, error) {
	var known map[string]jobdata.DBSeq
	err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		var err error
		known, err = jobdata.DBSeqs(tx.KV())
		return err
	})
	return known, err
}
