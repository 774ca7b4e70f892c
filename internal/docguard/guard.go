package docguard

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/sdk"
)

// settings is the parsed [docguard] config section.
type settings struct {
	dbs          []string
	required     []string
	audit        []string
	hidden       []string
	stateFile    string
	hangForTests bool
	// auditDown makes the audit log unwritable, as a plugin's own store
	// may go down: after_doc_write and catch-ups fail with 503 while the
	// plugin stays healthy (audit_unavailable, for the host's tests).
	auditDown bool
}

func parseSettings(cfg hooks.Config, version string) settings {
	s := settings{
		dbs:          splitList(cfg.Get("docguard", "dbs", "*_guarded")),
		required:     splitList(cfg.Get("docguard", "required", "type,owner")),
		audit:        splitList(cfg.Get("docguard", "audit", "")),
		hidden:       splitList(cfg.Get("docguard", "hidden", "secret")),
		stateFile:    cfg.Get("docguard", "state_file", ""),
		hangForTests: cfg.Get("docguard", "hang_for_tests", "false") == "true",
		auditDown:    cfg.Get("docguard", "audit_unavailable", "false") == "true",
	}
	if version == "v2" {
		s.required = append(s.required, "created_at")
	}
	return s
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// guard is the docguard plugin.
type guard struct {
	version string

	mu    sync.Mutex
	set   settings
	host  hooks.Services
	audit *auditLog
	calls map[hooks.Hook]map[string]int64
	catch map[string]int64
}

// New returns the docguard plugin that reports version as its own (the
// tests run "v1" and "v2"; v2 also requires "created_at").
func New(version string) sdk.Plugin {
	return &guard{version: version, calls: map[hooks.Hook]map[string]int64{}, catch: map[string]int64{}}
}

// Info subscribes the guarded dbs to every hook and the audited ones to the
// after_* hooks, and serves /_docguard/*.
func (g *guard) Info() hooks.PluginInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	info := hooks.PluginInfo{Name: "docguard", Version: g.version,
		Routes: []hooks.Route{{Path: "/_docguard/*"}}}
	for _, p := range g.set.dbs {
		for _, h := range hooks.All() {
			info.Subscriptions = append(info.Subscriptions, hooks.Subscription{Hook: h, DB: p})
		}
	}
	for _, p := range g.set.audit {
		for _, h := range []hooks.Hook{hooks.AfterDocWrite, hooks.AfterDBCreate, hooks.AfterDBDelete} {
			info.Subscriptions = append(info.Subscriptions, hooks.Subscription{Hook: h, DB: p})
		}
	}
	return info
}

// Configure reads the [docguard] section.
func (g *guard) Configure(_ context.Context, cfg hooks.Config) error {
	s := parseSettings(cfg, g.version)
	g.mu.Lock()
	g.set = s
	g.mu.Unlock()
	sdk.Logger().Info("docguard configured", "version", g.version, "dbs", strings.Join(s.dbs, ","),
		"required", strings.Join(s.required, ","))
	return nil
}

// Start opens the audit log; only the started process writes it.
func (g *guard) Start(_ context.Context, host hooks.Services) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	a, err := openAudit(g.set.stateFile)
	if err != nil {
		return err
	}
	g.host, g.audit = host, a
	sdk.Logger().Info("docguard started", "version", g.version, "pid", os.Getpid())
	return nil
}

// Stop closes the audit log so the next process can open it.
func (g *guard) Stop(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.audit != nil {
		err := g.audit.close()
		g.audit = nil
		return err
	}
	return nil
}

func (g *guard) count(h hooks.Hook, db string) {
	g.mu.Lock()
	m := g.calls[h]
	if m == nil {
		m = map[string]int64{}
		g.calls[h] = m
	}
	m[db]++
	g.mu.Unlock()
}

// BeforeDocUpdate rejects guarded docs missing a required field with
// 403 forbidden; deletions and the host's own writes pass.
func (g *guard) BeforeDocUpdate(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	g.count(hooks.BeforeDocUpdate, db)
	g.mu.Lock()
	set := g.set
	g.mu.Unlock()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(doc, &body); err != nil {
		return nil, &hooks.Error{Status: 400, Err: "bad_request", Reason: "Document must be a JSON object"}
	}
	if set.hangForTests && string(body["_docguard_hang"]) == "true" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if user.IsSystem() || string(body["_deleted"]) == "true" {
		return doc, nil
	}
	for _, f := range set.required {
		if _, ok := body[f]; !ok {
			return nil, hooks.Forbidden(fmt.Sprintf("Document is missing required field %q.", f))
		}
	}
	return doc, nil
}

// AfterDocRead removes the hidden fields for readers who are not admins.
func (g *guard) AfterDocRead(_ context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	g.count(hooks.AfterDocRead, db)
	if user.IsAdmin() {
		return doc, nil
	}
	g.mu.Lock()
	hidden := g.set.hidden
	g.mu.Unlock()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(doc, &body); err != nil {
		return doc, nil
	}
	changed := false
	for _, f := range hidden {
		if _, ok := body[f]; ok {
			delete(body, f)
			changed = true
		}
	}
	if !changed {
		return doc, nil
	}
	return json.Marshal(body)
}

// AfterDocWrite records the write in the audit log.
func (g *guard) AfterDocWrite(_ context.Context, ev hooks.DocWrite) error {
	g.count(hooks.AfterDocWrite, ev.DB)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.audit == nil {
		return fmt.Errorf("docguard is not started")
	}
	if g.set.auditDown {
		return errAuditDown
	}
	return g.audit.record(ev.DB, ev.DocID, ev.Seq)
}

// errAuditDown is the error of every audit write while audit_unavailable is set.
var errAuditDown = &hooks.Error{Status: 503, Err: "service_unavailable", Reason: "The audit log is unavailable."}

// AfterDBCreate counts the event.
func (g *guard) AfterDBCreate(ctx context.Context, db, _ string) error {
	g.count(hooks.AfterDBCreate, db)
	return nil
}

// DBUpdated counts the event.
func (g *guard) DBUpdated(_ context.Context, db, _ string) error {
	g.count(hooks.DBUpdated, db)
	return nil
}

// AfterDBDelete counts the event and forgets the db's audit.
func (g *guard) AfterDBDelete(_ context.Context, db, _ string) error {
	g.count(hooks.AfterDBDelete, db)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.audit == nil {
		return fmt.Errorf("docguard is not started")
	}
	return g.audit.forget(db)
}

// CatchUp reads db's changes feed from the last audited seq.
func (g *guard) CatchUp(ctx context.Context, db string) error {
	g.mu.Lock()
	g.catch[db]++
	host, a, down := g.host, g.audit, g.set.auditDown
	g.mu.Unlock()
	if host == nil || a == nil {
		return fmt.Errorf("docguard is not started")
	}
	if down {
		return errAuditDown
	}
	for {
		g.mu.Lock()
		since := a.lastSeq(db)
		g.mu.Unlock()
		page, err := host.Changes(ctx, db, since, 500)
		if err != nil {
			if he, ok := err.(*hooks.Error); ok && he.Status == 404 {
				return nil
			}
			return err
		}
		if len(page.Results) == 0 {
			return nil
		}
		g.mu.Lock()
		for _, c := range page.Results {
			if err := a.record(db, c.ID, c.Seq); err != nil {
				g.mu.Unlock()
				return err
			}
		}
		g.mu.Unlock()
	}
}

// ActiveTasks reports one docguard_audit task.
func (g *guard) ActiveTasks(context.Context) ([]json.RawMessage, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var docs int
	if g.audit != nil {
		for _, ids := range g.audit.docs {
			docs += len(ids)
		}
	}
	t, err := json.Marshal(map[string]any{"type": "docguard_audit", "pid": os.Getpid(), "version": g.version, "docs_audited": docs})
	return []json.RawMessage{t}, err
}
