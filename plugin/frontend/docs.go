package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/jobserver/jobdata"
)

// changesPage is how many changes catch-up reads per request.
const changesPage = 500

// docChange is one version of a replication doc to process.
type docChange struct {
	db, uuid, docID, seq string
	deleted              bool
	body                 []byte
}

// AfterDocWrite processes one write to a replicator db.
func (f *Frontend) AfterDocWrite(ctx context.Context, ev hooks.DocWrite) error {
	if !IsReplicatorDB(ev.DB) {
		return nil
	}
	unlock := f.lockDB(ev.DB)
	defer unlock()
	return f.process(ctx, docChange{db: ev.DB, uuid: ev.DBUUID, docID: ev.DocID, seq: ev.Seq, deleted: ev.Deleted, body: ev.Doc})
}

// docState returns a doc's `_replication_state`.
func docState(body []byte) string {
	var d struct {
		State string `json:"_replication_state"`
	}
	json.Unmarshal(body, &d)
	return d.State
}

// process applies one doc version to the jobs (CouchDB 4.x
// couch_replicator after_doc_write): design docs and docs in a terminal
// state are ignored; a deleted doc removes its job; a doc whose parsed
// replication equals that of its pending/running job changes nothing;
// otherwise the job is replaced by a fresh one. A doc that does not parse
// (it bypassed before_doc_update, e.g. by a restore) becomes a job in state
// failed so `_scheduler/docs` shows why. The db's seq is recorded in the
// same transaction.
func (f *Frontend) process(ctx context.Context, c docChange) error {
	jobID := parse.PersistentJobID(c.uuid, c.docID)
	var fresh *jobdata.Record
	skip := strings.HasPrefix(c.docID, "_design/") || strings.HasPrefix(c.docID, "_local/")
	if !skip && !c.deleted {
		switch docState(c.body) {
		case jobdata.Completed, jobdata.Failed:
			skip = true
		default:
			now := f.cfg.Now()
			rep, err := parse.ReplicationDoc(c.body, parse.UserCtx{}, f.options())
			if err != nil {
				var pe *parse.Error
				reason := err.Error()
				if errors.As(err, &pe) {
					reason = pe.Reason
				}
				fresh = jobdata.NewFailed(c.db, c.uuid, c.docID, reason, now)
			} else {
				rep.DB, rep.DocID = c.db, c.docID
				fresh = jobdata.New(rep, c.db, c.uuid, c.docID, now)
			}
		}
	}
	return f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		if c.seq != "" {
			jobdata.SetDBSeq(tx.KV(), c.db, jobdata.DBSeq{UUID: c.uuid, Seq: c.seq})
		}
		if skip {
			return nil
		}
		if fresh == nil { // deleted
			_, err := jobdata.Remove(tx, jobID)
			return err
		}
		if data, err := tx.GetData(jobdata.JobType, jobID); err == nil {
			if old, derr := jobdata.Decode(data); derr == nil && old.Active() && old.Rep != nil && fresh.Rep != nil && old.Rep.Equal(fresh.Rep) {
				return nil
			}
		} else if !errors.Is(err, jobs.ErrNotFound) {
			return err
		}
		if _, err := jobdata.Remove(tx, jobID); err != nil {
			return err
		}
		return tx.Add(jobdata.JobType, jobID, fresh.Encode(), zeroTime)
	})
}

// CatchUp re-reads a replicator db's changes feed from the last processed
// seq and applies every change, so writes whose events were dropped are
// not missed. A db that no longer exists has its jobs removed; a db that
// was re-created (new uuid) is read from the start and the old instance's
// jobs are removed.
func (f *Frontend) CatchUp(ctx context.Context, db string) error {
	if !IsReplicatorDB(db) {
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
	for {
		page, err := f.cfg.Services.Changes(ctx, db, since, changesPage)
		if err != nil {
			return fmt.Errorf("catch-up of %s: %w", db, err)
		}
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
			if err := f.process(ctx, c); err != nil {
				return err
			}
		}
		if page.LastSeq != "" && page.LastSeq != since {
			since = page.LastSeq
			if err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
				jobdata.SetDBSeq(tx.KV(), db, jobdata.DBSeq{UUID: uuid, Seq: since})
				return nil
			}); err != nil {
				return err
			}
		}
		if len(page.Results) == 0 || page.Pending <= 0 {
			return nil
		}
	}
}

// AfterDBCreate scans a replicator db that was created or restored.
func (f *Frontend) AfterDBCreate(ctx context.Context, db, uuid string) error {
	if !IsReplicatorDB(db) {
		return nil
	}
	return f.catchUp(ctx, db, uuid)
}

// AfterDBDelete removes every job of a deleted replicator db.
func (f *Frontend) AfterDBDelete(ctx context.Context, db, uuid string) error {
	if !IsReplicatorDB(db) {
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
				if _, err := jobdata.Remove(tx, id); err != nil {
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
		if IsReplicatorDB(d.Name) {
			live[d.Name] = d.UUID
		}
	}
	var known map[string]jobdata.DBSeq
	if err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		var err error
		known, err = jobdata.DBSeqs(tx.KV())
		return err
	}); err != nil {
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
