package frontend

import (
	"context"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
)

// WriteDocStates writes the terminal states (completed, failed) of doc
// jobs into their `_replicator` docs, every interval until ctx ends. It is
// for api_frontend nodes whose queue is shared: the node that ran a job may
// not serve the doc, so the frontend, which does, writes what the queue
// says. A state is written once per process (WriteDocState itself writes
// nothing when the doc already holds it); a doc this server does not have
// is skipped.
func (f *Frontend) WriteDocStates(ctx context.Context, interval time.Duration) {
	written := map[string]string{} // job id -> state written
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var due []string
		err := f.recs.FoldSummaries(ctx, func(jobID string, s jobdata.Summary) error {
			if s.DocID != "" && (s.State == jobdata.Completed || s.State == jobdata.Failed) && written[jobID] != s.State {
				due = append(due, jobID)
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			f.log.Warn("reading finished jobs failed", "error", err)
		}
		for _, id := range due {
			rec, err := f.recs.Get(ctx, id)
			if err != nil {
				continue
			}
			st, ok := jobstore.TerminalDocState(rec)
			if !ok {
				continue
			}
			if err := jobstore.WriteDocState(ctx, f.cfg.Services, rec.DBName, rec.DocID, st); err != nil {
				f.log.Warn("could not write replication state into doc", "db", rec.DBName, "doc_id", rec.DocID, "error", err)
				continue
			}
			written[id] = rec.State
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
