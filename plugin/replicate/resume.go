package replicate

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/couchepi/couchepi/parse"
)

// Resume is what a continuous run knew of its endpoints and checkpoints
// when it stopped with its final checkpoint written (Options.OnResume).
// Given to the next run of the same replication (Options.Resume), it lets
// that run start with one request, the source's checkpoint doc, instead of
// four (both endpoints' info and both checkpoint docs): thousands of
// parked jobs woken by one write to their shared source start at once.
//
// It is a hint, never trusted alone: the run uses it only when the
// source's checkpoint doc still has the revision and seq the stopped run
// left (so the source was not deleted and recreated, and no other run
// checkpointed since). Otherwise it starts as without it. A target deleted
// or recreated meanwhile shows as it does to a running replication: a
// failed write, or a conflict at the next checkpoint, after which the job
// restarts from what both checkpoints say.
type Resume struct {
	repID            parse.RepID
	seq              json.RawMessage // source_last_seq of the checkpoint the stopped run left
	srcRev, tgtRev   string          // the checkpoint docs' revisions
	srcInfo, tgtInfo dbInfo          // what the endpoints' instance_start_time was
	// The adaptive choices of the stopped run (whether _revs_diff and
	// _bulk_get are worth asking), which CouchDB's job keeps while it
	// runs: a woken fan-out job would otherwise ask _revs_diff of its
	// target for its first half a dozen batches again.
	revsDiff, bulkGet adaptiveState
}

// Seq is the checkpointed source seq a resumed run starts from.
func (r *Resume) Seq() json.RawMessage { return r.seq }

// At reports whether the hint was left at the checkpointed source seq seq.
func (r *Resume) At(seq json.RawMessage) bool { return seqString(r.seq) == seqString(seq) }

// resume returns the run's Resume, nil when it has no checkpoint on both
// endpoints to resume from. Call it once the run has stopped.
func (r *run) resume() *Resume {
	r.cpMu.Lock()
	defer r.cpMu.Unlock()
	// Without a checkpoint on the source there is nothing there to
	// confirm the hint with: the next run starts in full.
	if !r.rep.UseCheckpoints || r.onTargetAlone() || r.srcRev == "" || r.tgtRev == "" || len(r.committed) == 0 {
		return nil
	}
	return &Resume{repID: r.repID, seq: bytes.Clone(r.committed), srcRev: r.srcRev, tgtRev: r.tgtRev,
		srcInfo: r.srcInfo, tgtInfo: r.tgtInfo, revsDiff: r.revsDiffEMA.state(), bulkGet: r.bulkGetEMA.state()}
}

// startResumed takes the endpoints' info and the checkpoint revisions from
// opts.Resume once the source's checkpoint doc (src) confirms it; the run
// then starts from the hint's seq with src's history. It reports false
// when the hint does not hold, with read set when the source's checkpoint
// was read (src, nil if missing), so that the full start does not read
// it again.
func (r *run) startResumed(ctx context.Context) (ok bool, src *localDoc, read bool, err error) {
	h := r.opts.Resume
	if h == nil || !r.rep.UseCheckpoints || r.opts.RepID == nil || h.repID != *r.opts.RepID {
		return false, nil, false, nil
	}
	src, err = readCheckpoint(ctx, r.src, h.repID.Base)
	if err != nil {
		return false, nil, false, asError(err)
	}
	if src == nil || src.Rev != h.srcRev || !h.At(src.Body.SourceLastSeq) {
		return false, src, true, nil
	}
	r.repID = h.repID
	r.srcInfo, r.tgtInfo = h.srcInfo, h.tgtInfo
	r.srcRev, r.tgtRev = h.srcRev, h.tgtRev
	r.existing = src.Body
	r.revsDiffEMA.set(h.revsDiff)
	r.bulkGetEMA.set(h.bulkGet)
	return true, src, true, nil
}
