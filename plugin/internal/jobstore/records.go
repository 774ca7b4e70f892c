package jobstore

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// ErrNotFound is returned when no job matches an id: it is both the
// queue's jobs.ErrNotFound and the jobdata.ErrNotFound that readers of
// records (the monitor) look for.
var ErrNotFound error = notFoundError{}

type notFoundError struct{}

func (notFoundError) Error() string { return jobs.ErrNotFound.Error() }

func (notFoundError) Is(target error) bool {
	return target == jobs.ErrNotFound || target == jobdata.ErrNotFound
}

// notFound turns the queue's jobs.ErrNotFound into ErrNotFound, leaving
// other errors as they are.
func notFound(err error) error {
	if err != nil && errors.Is(err, jobs.ErrNotFound) {
		return ErrNotFound
	}
	return err
}

// The scheduled times of pending jobs: a woken job goes first (stime 0),
// then new jobs (1 ms after the epoch: due at once on every node, however
// its clock is set); jobs stopped for rotation or backoff wait until their
// time.

// WokenTime is the scheduled time of a parked job woken by a change of
// its source.
func WokenTime() time.Time { return time.Time{} }

// AddedTime is the scheduled time of a new job.
func AddedTime() time.Time { return time.UnixMilli(1) }

// ParkedTime is the scheduled time of a parked job: far enough in the
// future that it never becomes due by itself.
func ParkedTime() time.Time { return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC) }

// Records reads and removes replication job records in a jobs queue. It
// implements monitor.Source.
type Records struct {
	Q *jobs.Queue
	// Keys opens the records' sealed endpoints.
	Keys *seal.Keyring
}

// shownState is the state a record in queue state st shows: a record
// still saying running while the queue has the job pending was left by a
// runner that lost it (its node's lease expired, or it stopped without
// settling): it is pending until a runner takes it again.
func shownState(recState string, st jobs.State) string {
	if recState == jobdata.Running && st == jobs.Pending {
		return jobdata.Pending
	}
	return recState
}

// decodeShown decodes a record as Records shows it (see shownState).
func decodeShown(jobID string, data []byte, st jobs.State, keys *seal.Keyring) (*jobdata.Record, error) {
	rec, err := jobdata.Decode(data, keys, jobID)
	if errors.Is(err, jobdata.ErrNewerFormat) {
		rec, err = jobdata.Partial(data), nil // a newer version's: shown, without its endpoints
	}
	if err != nil {
		return nil, err
	}
	rec.State = shownState(rec.State, st)
	return rec, nil
}

// getShown reads job jobID's record in tx as Records shows it.
func getShown(tx *jobs.Tx, keys *seal.Keyring, jobID string) (*jobdata.Record, error) {
	st, err := tx.GetState(jobdata.JobType, jobID)
	if err != nil {
		return nil, err
	}
	data, err := tx.GetData(jobdata.JobType, jobID)
	if err != nil {
		return nil, err
	}
	return decodeShown(jobID, data, st, keys)
}

// Fold calls fn for every replication job record (records that do not
// decode are skipped: they cannot be shown or run).
func (r Records) Fold(ctx context.Context, fn func(jobID string, rec *jobdata.Record) error) error {
	return r.Q.Fold(ctx, jobdata.JobType, func(id string, st jobs.State, data []byte) error {
		rec, err := decodeShown(id, data, st, r.Keys)
		if err != nil {
			return nil
		}
		return fn(id, rec)
	})
}

// CountStates counts the jobs per state (jobdata.States). It reads only each
// record's state member, so a scrape of 100k jobs does not decode 100k
// records; records without a readable state are skipped, as Fold skips them.
func (r Records) CountStates(ctx context.Context) (map[string]int, error) {
	counts := make(map[string]int, len(jobdata.States()))
	err := r.Q.Fold(ctx, jobdata.JobType, func(_ string, qst jobs.State, data []byte) error {
		if st, ok := jobdata.StateOf(data); ok {
			counts[shownState(st, qst)]++
		}
		return nil
	})
	return counts, err
}

// FoldSummaries calls fn with every replication job's id and jobdata.Summary,
// decoding no record (records without a readable state are skipped, as
// Fold skips records that do not decode).
func (r Records) FoldSummaries(ctx context.Context, fn func(jobID string, s jobdata.Summary) error) error {
	return r.Q.Fold(ctx, jobdata.JobType, func(id string, st jobs.State, data []byte) error {
		s, ok := jobdata.Summarize(data)
		if !ok {
			return nil
		}
		s.State = shownState(s.State, st)
		return fn(id, s)
	})
}

// Get returns one job's record.
func (r Records) Get(ctx context.Context, jobID string) (*jobdata.Record, error) {
	var rec *jobdata.Record
	err := r.Q.Transact(ctx, func(tx *jobs.Tx) error {
		var err error
		rec, err = getShown(tx, r.Keys, jobID)
		return err
	})
	return rec, notFound(err)
}

// GetMany returns the records of jobIDs read in one transaction, so that
// they show one moment of the queue; a job that is gone, or whose record
// does not decode, has a nil record.
func (r Records) GetMany(ctx context.Context, jobIDs []string) ([]*jobdata.Record, error) {
	out := make([]*jobdata.Record, len(jobIDs))
	err := r.Q.Transact(ctx, func(tx *jobs.Tx) error {
		// One request per many jobs where the store can: one by one, a
		// page of 1,000 jobs on etcd was 1,000 round trips (5-40 s).
		if err := tx.PrefetchJobs(jobdata.JobType, jobIDs); err != nil {
			return err
		}
		for i, id := range jobIDs {
			out[i] = nil
			st, err := tx.GetState(jobdata.JobType, id)
			if errors.Is(err, jobs.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			data, err := tx.GetData(jobdata.JobType, id)
			if err != nil {
				return err
			}
			// A record that does not decode is skipped, as Fold skips it:
			// one record sealed with a key this node lacks (or damaged)
			// does not hide the others.
			out[i], _ = decodeShown(id, data, st, r.Keys)
		}
		return nil
	})
	return out, err
}

// Lookup finds a job by replication id (full, or with "+" turned into
// spaces by form decoding) through the ownership index, else by job id.
func (r Records) Lookup(ctx context.Context, id string) (*jobdata.Record, error) {
	jobID, err := r.Resolve(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.Get(ctx, jobID)
}

// Doc returns the job of a replication doc, found through the db's
// current instance uuid (recorded with its seq); ErrNotFound if none.
func (r Records) Doc(ctx context.Context, db, docID string) (*jobdata.Record, error) {
	var rec *jobdata.Record
	err := r.Q.Transact(ctx, func(tx *jobs.Tx) error {
		pos, err := GetDBSeq(tx.KV(), db)
		if err != nil {
			return err
		}
		if pos.UUID == "" {
			return ErrNotFound
		}
		rec, err = getShown(tx, r.Keys, parse.PersistentJobID(pos.UUID, docID))
		return err
	})
	return rec, notFound(err)
}

// Resolve maps a replication id or job id to a job id (ErrNotFound if neither).
func (r Records) Resolve(ctx context.Context, id string) (string, error) {
	var jobID string
	err := r.Q.Transact(ctx, func(tx *jobs.Tx) error {
		jobID = ""
		owner, err := RepIDOwner(tx.KV(), parse.ParseRepID(id).String())
		if err != nil {
			return err
		}
		if owner != "" {
			if _, err := tx.GetState(jobdata.JobType, owner); err == nil {
				jobID = owner
				return nil
			}
		}
		if _, err := tx.GetState(jobdata.JobType, id); err == nil {
			jobID = id
			return nil
		}
		return ErrNotFound
	})
	return jobID, err
}

// Remove deletes a job and releases its replication id, inside tx. A job
// that does not exist is not an error. It opens nothing: the replication
// id is read from the record's readable part.
func Remove(tx *jobs.Tx, jobID string) error {
	data, err := tx.GetData(jobdata.JobType, jobID)
	if errors.Is(err, jobs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := tx.Remove(jobdata.JobType, jobID); err != nil {
		return err
	}
	clearTransientDone(tx.KV(), jobID)
	if s, ok := jobdata.Summarize(data); ok {
		return ClearRepIDOwner(tx.KV(), s.RepID, jobID)
	}
	return nil
}

// ErrUndecodable wraps the error of a job record Get could read but not
// decode (written by a newer, incompatible version, damaged, or sealed
// with a key the keyring does not hold).
var ErrUndecodable = errors.New("jobstore: undecodable job record")

// Get reads and decodes the record of job jobID in tx, opening it with
// keys: jobs.ErrNotFound when there is no such job, an error wrapping
// ErrUndecodable (and jobdata.Decode's error) when its record does not decode.
func Get(tx *jobs.Tx, keys *seal.Keyring, jobID string) (*jobdata.Record, error) {
	data, err := tx.GetData(jobdata.JobType, jobID)
	if err != nil {
		return nil, err
	}
	rec, err := jobdata.Decode(data, keys, jobID)
	if err != nil {
		return nil, fmt.Errorf("%w: job %s: %w", ErrUndecodable, jobID, err)
	}
	return rec, nil
}

// Peek is Get for looking at a record, not writing it back: a record of a
// newer format is read in part (jobdata.Partial) rather than refused, so
// that a duplicate check still sees a newer version's live job.
func Peek(tx *jobs.Tx, keys *seal.Keyring, jobID string) (*jobdata.Record, error) {
	data, err := tx.GetData(jobdata.JobType, jobID)
	if err != nil {
		return nil, err
	}
	rec, err := jobdata.Decode(data, keys, jobID)
	switch {
	case errors.Is(err, jobdata.ErrNewerFormat):
		return jobdata.Partial(data), nil
	case err != nil:
		return nil, fmt.Errorf("%w: job %s: %w", ErrUndecodable, jobID, err)
	}
	return rec, nil
}

// Put makes rec the job jobID inside tx (CouchDB 4.x add_job): when the
// job already holds the same normalised replication and is pending or
// running, nothing changes (the job is not restarted); otherwise the old
// job, if any, is removed with its replication id and rec is added to run
// as soon as possible, sealed with keys.
func Put(tx *jobs.Tx, keys *seal.Keyring, jobID string, rec *jobdata.Record) error {
	return PutEncoded(tx, keys, jobID, rec, rec.Encode(keys, jobID))
}

// PutEncoded is Put for a record the caller has already encoded (sealed
// with keys) as data.
func PutEncoded(tx *jobs.Tx, keys *seal.Keyring, jobID string, rec *jobdata.Record, data []byte) error {
	old, err := Get(tx, keys, jobID)
	switch {
	case err == nil:
		if old.Active() && old.Rep != nil && rec.Rep != nil && old.Rep.Equal(rec.Rep) {
			return nil
		}
	case !errors.Is(err, jobs.ErrNotFound) && !errors.Is(err, ErrUndecodable):
		return err
	}
	if err := Remove(tx, jobID); err != nil {
		return err
	}
	return tx.Add(jobdata.JobType, jobID, data, AddedTime())
}
