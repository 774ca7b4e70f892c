package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// okLocalID is the answer to a continuous start or a cancel, in CouchDB's key order.
type okLocalID struct {
	OK      bool   `json:"ok"`
	LocalID string `json:"_local_id"`
}

// maxBody bounds a POST /_replicate body.
const maxBody = 4 << 20

// Replicate serves `POST /_replicate` for user (CouchDB 3.x answers):
// one-shot replications block until done and answer with the final
// checkpoint; continuous ones answer 202 at once; `cancel` removes the job.
// Transient jobs live in the queue like the others, so they survive restarts.
func (f *Frontend) Replicate(w http.ResponseWriter, r *http.Request, user hooks.UserCtx) {
	if herr := f.replicate(w, r, user); herr != nil {
		hooks.WriteError(w, herr)
	}
}

func (f *Frontend) replicate(w http.ResponseWriter, r *http.Request, user hooks.UserCtx) *hooks.Error {
	if r.Method != http.MethodPost {
		return &hooks.Error{Status: 405, Err: "method_not_allowed", Reason: "Only POST allowed"}
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return &hooks.Error{Status: 415, Err: "bad_content_type", Reason: "Content-Type must be application/json"}
	}
	if user.Name == "" && !user.IsAdmin() {
		return &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not authorized to access this db."}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return &hooks.Error{Status: 400, Err: "bad_request", Reason: "Could not read the request body"}
	}
	if len(body) > maxBody {
		// Cut short, it would be "not a JSON object"; whole, its job could
		// not be stored anyway (jobstore.MaxNewSize).
		return &hooks.Error{Status: 413, Err: "too_large", Reason: "the request entity is too large"}
	}
	opts := f.options()
	opts.LocalURL = f.cfg.LocalURL
	opts.LocalHeaders = map[string]string{}
	for _, h := range []string{"Authorization", "Cookie"} {
		if v := r.Header.Get(h); v != "" {
			opts.LocalHeaders[h] = v
		}
	}
	rep, err := parse.ReplicateRequest(body, user, opts)
	if err != nil {
		return parseErrorResponse(err)
	}
	ctx := r.Context()
	if rep.Cancel {
		return f.cancel(ctx, w, rep, user, opts)
	}
	if err := parse.CheckHosts(rep, opts); err != nil {
		return hooks.Forbidden(parse.ReasonHostNotAllowed)
	}
	return f.start(ctx, w, rep, opts.Restricts(rep), user)
}

// unreachable is the answer to a replication the host policy restricts
// for every failure of its start or run (jobdata.UnreachableReason).
func unreachable() *hooks.Error {
	return &hooks.Error{Status: 500, Err: jobdata.UnreachableKind, Reason: jobdata.UnreachableReason}
}

// parseErrorResponse maps a body validation error to 400 bad_request with
// the parser's reason. Deliberately not CouchDB 3.x's answer to a missing
// endpoint (500 `error` "Missing replicator database", 3.5.0 sample 26): a
// bad body is the client's error, and reasons are the 4.x parser's texts
// ("Missing `source` field"), as for every other field.
func parseErrorResponse(err error) *hooks.Error {
	reason := err.Error()
	var pe *parse.Error
	if errors.As(err, &pe) {
		reason = pe.Reason
	}
	return &hooks.Error{Status: 400, Err: "bad_request", Reason: reason}
}

// repIDError maps a replication id failure to an HTTP answer: the one its
// typed error gives (see hooks.AsError), or 500 error.
func repIDError(err error) *hooks.Error {
	if e := hooks.AsError(err); e.Err != "unknown_error" {
		return e
	}
	return &hooks.Error{Status: 500, Err: "error", Reason: err.Error()}
}

// errNotServerAdmin is CouchDB's answer to a user who is not a server
// admin acting on another user's _replicate job (check_authorization).
var errNotServerAdmin = &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not a server admin."}

// cancel removes the transient job named by the body's id, or the job
// the same body started: the caller's own, else (as CouchDB looks it up by
// the replication id the body gives) another user's, which only a server
// admin may cancel.
func (f *Frontend) cancel(ctx context.Context, w http.ResponseWriter, rep *parse.Rep, user hooks.UserCtx, opts parse.Options) *hooks.Error {
	var jobID string
	if rep.ID != "" {
		id, err := f.recs.Resolve(ctx, rep.ID)
		if err != nil {
			return hooks.NotFound("missing")
		}
		jobID = id
	} else {
		jobID = parse.TransientJobID(rep, f.cfg.ServerUUID)
		if _, err := f.recs.Get(ctx, jobID); errors.Is(err, jobs.ErrNotFound) && parse.CheckHosts(rep, opts) == nil {
			if repID, err := f.cfg.RepID(ctx, rep); err == nil {
				if id, err := f.recs.Resolve(ctx, repID.String()); err == nil {
					jobID = id
				}
			}
		}
	}
	rec, err := f.recs.Get(ctx, jobID)
	if err != nil || !rec.FoundByID() {
		return hooks.NotFound("missing")
	}
	if !rec.Transient() {
		return &hooks.Error{Status: 401, Err: "unauthorized", Reason: "Persistent replication collision"}
	}
	if !user.IsAdmin() && rec.Rep != nil && rec.Rep.UserCtx.Name != user.Name {
		return errNotServerAdmin
	}
	repID := rec.RepID
	if repID == "" && rec.Rep != nil {
		id, err := f.cfg.RepID(ctx, rec.Rep)
		if err != nil {
			return repIDError(err)
		}
		repID = id.String()
	}
	if err := f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		err := jobstore.Remove(tx, jobID)
		return err
	}); err != nil {
		return &hooks.Error{Status: 500, Err: "error", Reason: err.Error()}
	}
	f.counts.jobsRemoved.Add(1)
	if f.cfg.StopJob != nil {
		if err := f.cfg.StopJob(ctx, jobID); err != nil {
			return &hooks.Error{Status: 500, Err: "error", Reason: "cancelled, but the replication did not stop in time: " + err.Error()}
		}
	}
	f.log.Info("transient replication cancelled", "job", jobID, "rep_id", repID)
	hooks.WriteJSON(w, http.StatusOK, okLocalID{true, repID})
	return nil
}

// start adds (or reuses) the transient job of rep and answers when it is
// done (one-shot) or at once (continuous). restricted: the host policy
// applies to rep, whose failures then all get one answer.
func (f *Frontend) start(ctx context.Context, w http.ResponseWriter, rep *parse.Rep, restricted bool, user hooks.UserCtx) *hooks.Error {
	repID, err := f.cfg.RepID(ctx, rep)
	if err != nil {
		if restricted {
			f.log.Info("replication id failed; its creator sees the host policy's one reason", "user", user.Name, "error", err.Error())
			return unreachable()
		}
		return repIDError(err)
	}
	jobID := parse.TransientJobID(rep, f.cfg.ServerUUID)
	fresh := jobdata.New(rep, "", "", "", f.cfg.Now())
	data, ok := jobstore.EncodeNew(fresh, f.cfg.Keys, jobID)
	if !ok {
		return &hooks.Error{Status: 400, Err: "bad_request", Reason: jobstore.TooLargeReason(len(data))}
	}
	var herr *hooks.Error
	err = f.cfg.Queue.Transact(ctx, func(tx *jobs.Tx) error {
		herr = nil
		owner, err := jobstore.RepIDOwner(tx.KV(), repID.String())
		if err != nil {
			return err
		}
		claim := true // no other live job holds the replication id
		if owner != "" && owner != jobID {
			if o, err := jobstore.Peek(tx, f.cfg.Keys, owner); err == nil {
				if o.Active() && o.RepID == repID.String() {
					switch {
					case !o.Transient():
						herr = &hooks.Error{Status: 401, Err: "unauthorized", Reason: "Persistent replication collision"}
						return nil
					case !user.IsAdmin() && o.Rep != nil && o.Rep.UserCtx.Name != user.Name:
						herr = errNotServerAdmin
						return nil
					}
					claim = false
				}
			}
		}
		fresh.RepID, fresh.BaseID = repID.String(), repID.Base
		if err := jobstore.PutEncoded(tx, f.cfg.Keys, jobID, fresh, fresh.Encode(f.cfg.Keys, jobID)); err != nil {
			return err
		}
		if !claim {
			return nil
		}
		// As in CouchDB, where a _replicate job is known by its id from
		// the moment it is added: cancel and _scheduler/jobs find it
		// before it first runs (the job server would claim the id only
		// then). Put keeps a live job of the same replication as it was.
		if cur, err := jobstore.Get(tx, f.cfg.Keys, jobID); err != nil || cur.RepID != repID.String() {
			return err
		}
		jobstore.SetRepIDOwner(tx.KV(), repID.String(), jobID)
		return nil
	})
	if err != nil {
		return &hooks.Error{Status: 500, Err: "error", Reason: err.Error()}
	}
	if herr != nil {
		return herr
	}
	f.counts.jobsAdded.Add(1)
	if rep.Continuous {
		hooks.WriteJSON(w, http.StatusAccepted, okLocalID{true, repID.String()})
		return nil
	}
	rec, err := f.wait(ctx, jobID)
	if err != nil {
		if errors.Is(err, jobs.ErrNotFound) {
			return &hooks.Error{Status: 500, Err: "error", Reason: "Replication was canceled"}
		}
		return &hooks.Error{Status: 500, Err: "error", Reason: err.Error()}
	}
	if rec.State != jobdata.Completed {
		status, name, reason := rec.Failure()
		return &hooks.Error{Status: status, Err: name, Reason: reason}
	}
	writeResult(w, rec.CheckpointHistory)
	return nil
}

// wait blocks until a job is finished and returns its record;
// jobs.ErrNotFound when it was removed (cancelled) meanwhile.
func (f *Frontend) wait(ctx context.Context, jobID string) (*jobdata.Record, error) {
	sub, st, data, err := f.cfg.Queue.Subscribe(ctx, jobdata.JobType, jobID)
	if err != nil {
		return nil, err
	}
	if sub != nil {
		defer sub.Close()
	}
	for st != jobs.Finished {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-sub.Events():
			if !ok {
				return nil, errors.New("job subscription closed")
			}
			if ev.State == jobs.NotFound {
				return nil, jobs.ErrNotFound
			}
			st, data = ev.State, ev.Data
		}
	}
	if data == nil {
		if data, err = f.cfg.Queue.GetData(ctx, jobdata.JobType, jobID); err != nil {
			return nil, err
		}
	}
	rec, err := jobdata.Decode(data, f.cfg.Keys, jobID)
	if errors.Is(err, jobdata.ErrNewerFormat) {
		// Run by a newer version's node: its outcome is in the part of
		// the record every format keeps.
		return jobdata.Partial(data), nil
	}
	return rec, err
}

// writeResult answers a completed one-shot: {"ok":true} merged in front of
// the final checkpoint body.
func writeResult(w http.ResponseWriter, body json.RawMessage) {
	out := []byte(`{"ok":true}`)
	if b := bytes.TrimSpace(body); len(b) > 2 && b[0] == '{' {
		out = append([]byte(`{"ok":true,`), b[1:]...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(out, '\n'))
}
