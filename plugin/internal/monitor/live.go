package monitor

import (
	"context"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// LiveStats returns the current stats of the job a record shows running
// on this node (by its node and pid), false when this node runs no such
// job (jobserver.Server.LiveStats).
type LiveStats func(node, pid string) (jobdata.Stats, bool)

// WithLive returns src with the records of the jobs this node runs
// showing their live stats, as of the request, instead of the stats last
// written to the queue: `_active_tasks` and `_scheduler/*` on the node
// that runs a job follow it batch by batch, as CouchDB's do.
func WithLive(src Source, live LiveStats) Source {
	if live == nil {
		return src
	}
	return liveSource{Source: src, live: live, now: time.Now}
}

type liveSource struct {
	Source
	live LiveStats
	now  func() time.Time
}

// overlay replaces a running record's stats with its live ones.
func (l liveSource) overlay(rec *jobdata.Record) *jobdata.Record {
	if rec == nil || rec.State != jobdata.Running || rec.PID == "" {
		return rec
	}
	st, ok := l.live(rec.Node, rec.PID)
	if !ok {
		return rec
	}
	c := *rec
	c.Stats = st
	c.StatsUpdated = l.now().Unix()
	return &c
}

func (l liveSource) Get(ctx context.Context, jobID string) (*jobdata.Record, error) {
	rec, err := l.Source.Get(ctx, jobID)
	return l.overlay(rec), err
}

func (l liveSource) GetMany(ctx context.Context, jobIDs []string) ([]*jobdata.Record, error) {
	recs, err := l.Source.GetMany(ctx, jobIDs)
	for i, rec := range recs {
		recs[i] = l.overlay(rec)
	}
	return recs, err
}

func (l liveSource) Lookup(ctx context.Context, id string) (*jobdata.Record, error) {
	rec, err := l.Source.Lookup(ctx, id)
	return l.overlay(rec), err
}

func (l liveSource) Doc(ctx context.Context, db, docID string) (*jobdata.Record, error) {
	rec, err := l.Source.Doc(ctx, db, docID)
	return l.overlay(rec), err
}
