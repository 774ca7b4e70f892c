package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// ErrNotFound is returned by a Source when no job matches an id.
var ErrNotFound = jobdata.ErrNotFound

// Source gives the monitor read access to the job records. Listings walk
// every job's Summary and decode only the records they show.
type Source interface {
	// FoldSummaries calls fn with every replication job's id and Summary.
	FoldSummaries(ctx context.Context, fn func(jobID string, s jobdata.Summary) error) error
	// Get returns one job's record; ErrNotFound if it is gone.
	Get(ctx context.Context, jobID string) (*jobdata.Record, error)
	// GetMany returns the records of jobIDs as of one moment (nil for a
	// job that is gone), so a page never mixes two states of the queue.
	GetMany(ctx context.Context, jobIDs []string) ([]*jobdata.Record, error)
	// Lookup finds a job by replication id or job id; ErrNotFound if none.
	Lookup(ctx context.Context, id string) (*jobdata.Record, error)
	// Doc finds the job of a replication doc; ErrNotFound if none.
	Doc(ctx context.Context, db, docID string) (*jobdata.Record, error)
}

// Handler serves `GET /_scheduler/jobs[/{id}]` and `GET /_scheduler/docs[/{db}[/{docid}]]`.
type Handler struct {
	src Source
	// Settle, when set, runs before an answer is read: it waits (briefly)
	// until writes to replicator dbs made before the request are jobs, so
	// a client sees its own writes.
	Settle func(ctx context.Context)
}

// New returns a handler reading job records from src.
func New(src Source) *Handler { return &Handler{src: src} }

var (
	errNotAdmin = &hooks.Error{Status: http.StatusUnauthorized, Err: "unauthorized", Reason: "You are not a server admin."}
	errMissing  = &hooks.Error{Status: http.StatusNotFound, Err: "not_found", Reason: "missing"}
	errBadPath  = &hooks.Error{Status: http.StatusBadRequest, Err: "bad_request", Reason: "Invalid path"}
)

// Serve answers a `/_scheduler/*` request. admin says whether the caller
// is a server admin (CouchDB requires it for every scheduler endpoint).
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, admin bool) {
	v, err := h.serve(r, admin)
	if err != nil {
		hooks.WriteError(w, err)
		return
	}
	hooks.WriteJSON(w, http.StatusOK, v)
}

func (h *Handler) serve(r *http.Request, admin bool) (any, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return nil, &hooks.Error{Status: http.StatusMethodNotAllowed, Err: "method_not_allowed", Reason: "Only GET,HEAD allowed"}
	}
	if !admin {
		return nil, errNotAdmin
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/_scheduler/")
	if !ok {
		return nil, errBadPath
	}
	kind, rest, _ := strings.Cut(rest, "/")
	ctx := r.Context()
	if h.Settle != nil {
		h.Settle(ctx)
	}
	switch kind {
	case "jobs":
		if rest != "" {
			id, err := url.PathUnescape(rest)
			if err != nil {
				return nil, errBadPath
			}
			rec, err := h.src.Lookup(ctx, id)
			if err != nil || !rec.FoundByID() {
				if err == nil || errors.Is(err, ErrNotFound) {
					return nil, errMissing
				}
				return nil, err
			}
			return jobDetailJSON(rec), nil
		}
		return h.jobs(ctx, r.URL.Query())
	case "docs":
		db, docID, err := splitDocsPath(rest)
		if err != nil {
			return nil, err
		}
		if docID != "" {
			return h.doc(ctx, db, docID)
		}
		return h.docs(ctx, db, r.URL.Query())
	}
	return nil, errBadPath
}

// listParams are the paging and filter query parameters of the list endpoints.
type listParams struct {
	limit, skip int
	states      map[string]bool // nil = all
}

// parseListParams validates `limit`, `skip` and `states` as CouchDB does.
func parseListParams(q url.Values) (listParams, error) {
	p := listParams{limit: 100}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"limit", &p.limit}, {"skip", &p.skip}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return p, &hooks.Error{Status: http.StatusBadRequest, Err: "query_parse_error", Reason: f.name + " must be an integer"}
		}
		if n < 0 {
			return p, &hooks.Error{Status: http.StatusBadRequest, Err: "query_parse_error", Reason: f.name + " not in range of [0,infinity]"}
		}
		*f.dst = n
	}
	if v := q.Get("states"); v != "" {
		st, err := parseStates(v)
		if err != nil {
			return p, err
		}
		p.states = st
	}
	return p, nil
}

// AllStates returns the state names `?states=` accepts, in CouchDB 3.x's
// order (`initializing` and `error` are 3.x states merged into pending and
// crashing here; they are accepted and match nothing).
func AllStates() []string {
	return []string{"initializing", "error", "running", "pending", "crashing", "completed", "failed"}
}

// errStates is CouchDB's answer to a `states` filter naming a state it
// does not know. (CouchDB answers "Unknown states [x]. Choose from: …"
// instead when x happens to be an atom of its Erlang VM, such as `ok`.)
var errStates = &hooks.Error{Status: http.StatusBadRequest, Err: "query_parse_error",
	Reason: "States must be one or more of [" + strings.Join(AllStates(), ",") + "]"}

// parseStates parses a `states` filter: a comma list, case-insensitive;
// nil (every state) when it names none, as in CouchDB.
func parseStates(v string) (map[string]bool, error) {
	var set map[string]bool
	for _, s := range strings.Split(v, ",") {
		s = strings.ToLower(strings.TrimSpace(s))
		if s == "" {
			continue
		}
		if !slices.Contains(AllStates(), s) {
			return nil, errStates
		}
		if set == nil {
			set = map[string]bool{}
		}
		set[s] = true
	}
	return set, nil
}

// page applies skip and limit.
func page[T any](items []T, p listParams) []T {
	start := min(p.skip, len(items))
	end := min(start+p.limit, len(items))
	return items[start:end]
}

type keyed struct {
	key, jobID string
}

// collect lists the jobs whose summaries pass keep, sorted by key.
func (h *Handler) collect(ctx context.Context, keep func(jobdata.Summary) bool, key func(jobID string, s jobdata.Summary) string) ([]keyed, error) {
	var out []keyed
	err := h.src.FoldSummaries(ctx, func(jobID string, s jobdata.Summary) error {
		if keep(s) {
			out = append(out, keyed{key(jobID, s), jobID})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, err
}

// records decodes the records of one page of a listing. A job removed
// since the listing was made is left out.
func (h *Handler) records(ctx context.Context, page []keyed, shape func(*jobdata.Record) json.RawMessage) ([]json.RawMessage, error) {
	ids := make([]string, len(page))
	for i, k := range page {
		ids[i] = k.jobID
	}
	recs, err := h.src.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := []json.RawMessage{}
	for _, rec := range recs {
		if rec != nil {
			out = append(out, shape(rec))
		}
	}
	return out, nil
}

// jobs answers `GET /_scheduler/jobs`: pending, running and crashing jobs, sorted by id.
func (h *Handler) jobs(ctx context.Context, q url.Values) (any, error) {
	p, err := parseListParams(q)
	if err != nil {
		return nil, err
	}
	all, err := h.collect(ctx, func(s jobdata.Summary) bool {
		return s.Active() && (p.states == nil || p.states[s.ShownState()])
	}, func(jobID string, s jobdata.Summary) string {
		if s.RepID != "" {
			return s.RepID
		}
		return "\xff" + jobID // never-run jobs (id null) after the others
	})
	if err != nil {
		return nil, err
	}
	jobs, err := h.records(ctx, page(all, p), jobJSON)
	if err != nil {
		return nil, err
	}
	return struct {
		TotalRows int               `json:"total_rows"`
		Offset    int               `json:"offset"`
		Jobs      []json.RawMessage `json:"jobs"`
	}{len(all), min(p.skip, len(all)), jobs}, nil
}

// docs answers `GET /_scheduler/docs[/{db}]`: every replication doc's job,
// sorted by db and doc id.
func (h *Handler) docs(ctx context.Context, db string, q url.Values) (any, error) {
	p, err := parseListParams(q)
	if err != nil {
		return nil, err
	}
	all, err := h.collect(ctx, func(s jobdata.Summary) bool {
		return !s.Transient() && (db == "" || s.DBName == db) && (p.states == nil || p.states[s.ShownState()])
	}, func(_ string, s jobdata.Summary) string { return s.DBName + "\x00" + s.DocID })
	if err != nil {
		return nil, err
	}
	docs, err := h.records(ctx, page(all, p), docJSON)
	if err != nil {
		return nil, err
	}
	return struct {
		TotalRows int               `json:"total_rows"`
		Offset    int               `json:"offset"`
		Docs      []json.RawMessage `json:"docs"`
	}{len(all), min(p.skip, len(all)), docs}, nil
}

// doc answers `GET /_scheduler/docs/{db}/{docid}`.
func (h *Handler) doc(ctx context.Context, db, docID string) (any, error) {
	rec, err := h.src.Doc(ctx, db, docID)
	if errors.Is(err, ErrNotFound) {
		return nil, errMissing
	}
	if err != nil {
		return nil, err
	}
	return docDetailJSON(rec), nil
}

// splitDocsPath splits the escaped path after `/_scheduler/docs/` into a
// replicator db name (which may contain `/`, raw or as %2F) and a doc id.
// "" gives ("", ""): all dbs.
func splitDocsPath(rest string) (db, docID string, err error) {
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return "", "", nil
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		u, uerr := url.PathUnescape(s)
		if uerr != nil {
			return "", "", errBadPath
		}
		segs[i] = u
	}
	for i := range segs {
		db := strings.Join(segs[:i+1], "/")
		if jobdata.IsReplicatorDB(db) {
			return db, strings.Join(segs[i+1:], "/"), nil
		}
	}
	return "", "", errBadPath
}

// ActiveTasks returns the `_active_tasks` entries of the running jobs,
// decoding only their records.
func ActiveTasks(ctx context.Context, src Source) ([]json.RawMessage, error) {
	var running []string
	err := src.FoldSummaries(ctx, func(jobID string, s jobdata.Summary) error {
		if s.ShownState() == jobdata.Running {
			running = append(running, jobID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for _, id := range running {
		rec, err := src.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // stopped and removed since
		}
		if err != nil {
			return nil, err
		}
		if t := activeTask(rec); t != nil {
			out = append(out, t)
		}
	}
	return out, nil
}
