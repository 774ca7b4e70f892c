package frontend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
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
		if err := f.apply(ctx, db, jobstore.DBSeq{UUID: end.uuid, Seq: end.seq}, batch); err != nil {
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
// add and its encoding (nil = remove the job), or skip (nothing to do for
// this doc).
type planned struct {
	jobID string
	docID string
	uuid  string // the db's
	fresh *jobdata.Record
	data  []byte
	skip  bool
	// stripState: the doc is in a legacy state ("triggered", "error")
	// whose fields CouchDB 3.x removes before running it.
	stripState bool
}

// docRecord is the job record one doc version becomes (CouchDB 4.x
// couch_replicator after_doc_write): none, with skip, for design and
// local docs and docs in a terminal state; none, without skip, for a
// deleted doc (its job goes); a failed record with the reason for a doc
// that does not parse (it bypassed before_doc_update, e.g. by a restore),
// so `_scheduler/docs` shows why. legacy reports a 3.x state ("triggered",
// "error") whose fields are to be removed from the doc.
func docRecord(c docChange, opts parse.Options, now time.Time) (rec *jobdata.Record, skip, legacy bool) {
	if strings.HasPrefix(c.docID, "_design/") || strings.HasPrefix(c.docID, "_local/") {
		return nil, true, false
	}
	if c.deleted {
		return nil, false, false
	}
	rep, state, err := parse.ReplicationDocState(c.body, parse.UserCtx{}, opts)
	switch state {
	case jobdata.Completed, jobdata.Failed:
		return nil, true, false
	case "triggered", "error":
		legacy = true
	}
	if err != nil {
		var pe *parse.Error
		reason := err.Error()
		if errors.As(err, &pe) {
			reason = pe.Reason
		}
		return jobdata.NewFailed(c.db, c.uuid, c.docID, reason, now), false, legacy
	}
	rep.DB, rep.DocID = c.db, c.docID
	return jobdata.New(rep, c.db, c.uuid, c.docID, now), false, legacy
}

// plan parses one doc version into its job change. A record too large to
// be added as a job (a doc that got past before_doc_update's size check:
// a restore, an older version) becomes a failed job with the reason
// instead, so that it fails alone.
func (f *Frontend) plan(c docChange) planned {
	p := planned{jobID: parse.PersistentJobID(c.uuid, c.docID), docID: c.docID, uuid: c.uuid}
	p.fresh, p.skip, p.stripState = docRecord(c, f.options(), f.cfg.Now())
	if p.fresh == nil {
		return p
	}
	data, ok := jobstore.EncodeNew(p.fresh, f.cfg.Keys, p.jobID)
	if !ok {
		p.fresh = jobdata.NewFailed(c.db, c.uuid, c.docID, jobstore.TooLargeReason(len(data)), f.cfg.Now())
		data = p.fresh.Encode(f.cfg.Keys, p.jobID)
	}
	p.data = data
	return p
}

// txBudget bounds what one transaction of apply writes (planned.size): a
// store refuses a commit larger than it takes at once (etcd: 1.5 MiB per
// request by default), so a batch of many or large records is split, and
// a record near jobs.MaxDataSize goes in a transaction of its own.
const txBudget = 1 << 20

// size is about what the plan adds to a transaction: its record, and its
// keys, several of which hold the job id (the job row, its pending and
// tag index entries, its log entry, its data chunks).
func (p planned) size() int { return len(p.data) + 8*(len(p.jobID)+64) }

// apply applies doc changes of one db and records pos as the db's
// position (unless its seq is ""): a doc whose parsed replication equals
// that of its pending/running job changes nothing; otherwise the job is
// replaced by a fresh one. Only the last change of each doc in the batch
// counts. The changes go in as few transactions as txBudget allows, the
// position with the last. When a transaction fails, its changes are
// applied one by one and a doc whose job still cannot be stored becomes a
// failed job (failAlone): one doc never holds back the others.
func (f *Frontend) apply(ctx context.Context, db string, pos jobstore.DBSeq, batch []docChange) error {
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
	groups := splitPlans(plans, txBudget)
	for i, g := range groups {
		var at jobstore.DBSeq
		if i == len(groups)-1 {
			at = pos
		}
		err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error { return f.applyGroup(tx, db, at, g) })
		if err != nil && ctx.Err() == nil {
			err = f.failAlone(ctx, db, at, g, err)
		}
		if err != nil {
			return err
		}
	}
	for _, p := range plans {
		switch {
		case p.skip:
		case p.fresh == nil:
			f.counts.jobsRemoved.Add(1)
		default:
			f.counts.jobsAdded.Add(1)
		}
	}
	for _, p := range plans {
		if p.fresh == nil && !p.skip && f.cfg.StopJob != nil {
			// A deleted doc: stop its worker now rather than at its next
			// update, checkpointing the work done.
			jobID := p.jobID
			f.goAfter(func(ctx context.Context) {
				if err := f.cfg.StopJob(ctx, jobID); err != nil && ctx.Err() == nil {
					f.log.Warn("stopping the job of a deleted doc failed", "job", jobID, "error", err)
				}
			})
		}
		if p.stripState && f.cfg.Services != nil {
			docID := p.docID
			f.goAfter(func(ctx context.Context) {
				if err := jobstore.WriteDocState(ctx, f.cfg.Services, db, docID, jobstore.DocState{}); err != nil && ctx.Err() == nil {
					f.log.Warn("removing legacy state fields failed", "db", db, "doc", docID, "error", err)
				}
			})
		}
	}
	return nil
}

// splitPlans cuts plans into groups of at most budget bytes (their
// sizes); a plan larger than budget is a group of its own.
func splitPlans(plans []planned, budget int) [][]planned {
	var groups [][]planned
	start, size := 0, 0
	for i, p := range plans {
		if i > start && size+p.size() > budget {
			groups = append(groups, plans[start:i])
			start, size = i, 0
		}
		size += p.size()
	}
	return append(groups, plans[start:])
}

// applyGroup makes the jobs of plans match them and, unless at.Seq is "",
// records at as db's position, inside tx.
func (f *Frontend) applyGroup(tx *jobs.Tx, db string, at jobstore.DBSeq, plans []planned) error {
	// One read of all their jobs instead of a round trip per doc (on
	// etcd, under acceptors' load, 1,000 new docs took the frontend
	// over a minute to make jobs of, #39).
	ids := make([]string, 0, len(plans))
	for _, p := range plans {
		if !p.skip {
			ids = append(ids, p.jobID)
		}
	}
	if err := tx.PrefetchJobs(jobdata.JobType, ids); err != nil {
		return err
	}
	for _, p := range plans {
		if err := f.applyOne(tx, p); err != nil {
			return err
		}
	}
	if at.Seq != "" {
		jobstore.SetDBSeq(tx.KV(), db, at)
	}
	return nil
}

// failAlone applies plans, whose transaction failed with cause, one
// transaction each. A doc whose job cannot be stored on its own, twice
// (a record too large for the store is not tried again), becomes a failed
// job saying why, as long as that can be stored: then the store works and
// the trouble is this doc's. When even that fails, or a deleted doc's job
// cannot be removed, the store is at fault and the error is returned, for
// the host to retry the db's catch-up.
func (f *Frontend) failAlone(ctx context.Context, db string, at jobstore.DBSeq, plans []planned, cause error) error {
	f.log.Warn("applying replication doc changes together failed; applying them one by one", "db", db, "docs", len(plans), "error", cause)
	for i := range plans {
		p := &plans[i]
		one := func(tx *jobs.Tx) error { return f.applyGroup(tx, db, jobstore.DBSeq{}, []planned{*p}) }
		err := f.cfg.Queue.Transact(ctx, one)
		if err != nil && ctx.Err() == nil && !tooLarge(err) {
			err = f.cfg.Queue.Transact(ctx, one)
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil || p.fresh == nil || errors.Is(err, jobs.ErrNoTypeTimeout) {
			// A deleted doc's job that cannot be removed, or a queue no
			// replication node has set up yet (a frontend started
			// first): the store's trouble, not the doc's; the host
			// retries the db's catch-up.
			return err
		}
		reason := "The job of this replication could not be stored: " + err.Error()
		failed := jobdata.NewFailed(db, p.uuid, p.docID, reason, f.cfg.Now())
		data := failed.Encode(f.cfg.Keys, p.jobID)
		if ferr := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
			return jobstore.PutEncoded(tx, f.cfg.Keys, p.jobID, failed, data)
		}); ferr != nil {
			return err
		}
		f.log.Warn("replication doc failed: its job cannot be stored", "db", db, "doc_id", p.docID, "error", err)
		p.fresh, p.data, p.skip = failed, data, false
	}
	if at.Seq == "" {
		return nil
	}
	return f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		jobstore.SetDBSeq(tx.KV(), db, at)
		return nil
	})
}

// tooLarge reports whether err says a job record or a transaction is
// larger than the queue or its store takes.
func tooLarge(err error) bool {
	return errors.Is(err, jobs.ErrDataTooLarge) || errors.Is(err, kv.ErrTooLarge)
}

// applyOne makes the job of one doc match its plan, inside tx.
func (f *Frontend) applyOne(tx *jobs.Tx, p planned) error {
	if p.skip {
		return nil
	}
	if p.fresh == nil { // deleted
		return jobstore.Remove(tx, p.jobID)
	}
	return jobstore.PutEncoded(tx, f.cfg.Keys, p.jobID, p.fresh, p.data)
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
	var pos jobstore.DBSeq
	err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		var err error
		pos, err = jobstore.GetDBSeq(tx.KV(), db)
		return err
	})
	if err != nil {
		return err
	}
	if pos.UUID != "" && pos.UUID != uuid {
		if err := f.removeDBJobs(ctx, db, pos.UUID); err != nil {
			return err
		}
		pos = jobstore.DBSeq{}
	}
	if uuid == "" {
		return nil
	}
	since := pos.Seq
	if since == "" {
		f.counts.dbScans.Add(1)
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
		if err := f.apply(ctx, db, jobstore.DBSeq{UUID: uuid, Seq: since}, batch); err != nil {
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
				if err := jobstore.Remove(tx, id); err != nil {
					return err
				}
			}
			if last {
				if pos, err := jobstore.GetDBSeq(tx.KV(), db); err == nil && pos.UUID == uuid {
					jobstore.ClearDBSeq(tx.KV(), db)
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
func (f *Frontend) dbSeqs(ctx context.Context) (map[string]jobstore.DBSeq, error) {
	var known map[string]jobstore.DBSeq
	err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		var err error
		known, err = jobstore.DBSeqs(tx.KV())
		return err
	})
	return known, err
}
