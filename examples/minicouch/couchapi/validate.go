package couchapi

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/jsfilter"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

// docValidator runs a db's validate_doc_update functions on writes.
type docValidator struct {
	v       *jsfilter.Validator
	db      *store.DB
	userCtx []byte
	secObj  []byte
}

// loadValidator compiles the validate_doc_update functions of db's design
// docs; nil when there are none (the common case costs one range scan).
func (s *Server) loadValidator(ctx context.Context, db *store.DB, user hooks.UserCtx) (*docValidator, error) {
	lo, hi := store.DesignPrefix, "_design0"
	var ids []string
	if _, err := db.AllDocs(ctx, store.AllDocsOptions{StartKey: &lo, EndKey: &hi}, func(r store.AllDocsRow) error {
		ids = append(ids, r.ID)
		return nil
	}); err != nil {
		return nil, err
	}
	var srcs []string
	for _, id := range ids {
		d, err := db.Get(ctx, id, store.GetOptions{})
		if err != nil {
			continue
		}
		var m struct {
			VDU string `json:"validate_doc_update"`
		}
		if json.Unmarshal(d.Body, &m) == nil && strings.TrimSpace(m.VDU) != "" {
			srcs = append(srcs, m.VDU)
		}
	}
	if len(srcs) == 0 {
		return nil, nil
	}
	v, err := jsfilter.NewValidator(srcs)
	if err != nil {
		return nil, &hooks.Error{Status: 400, Err: "compilation_error", Reason: err.Error()}
	}
	sec, err := db.Security(ctx)
	if err != nil || len(sec) == 0 {
		sec = []byte("{}")
	}
	roles := user.Roles
	if roles == nil {
		roles = []string{}
	}
	uc := map[string]any{"db": db.Name(), "name": nil, "roles": roles}
	if user.Name != "" {
		uc["name"] = user.Name
	}
	ucJSON, _ := jsonobj.Marshal(uc)
	return &docValidator{v: v, db: db, userCtx: ucJSON, secObj: sec}, nil
}

// validate runs the functions on one doc; design and _local docs are not
// validated (CouchDB checks db-admin rights for design docs instead).
func (dv *docValidator) validate(ctx context.Context, d *store.Doc) *store.Error {
	if dv == nil || strings.HasPrefix(d.ID, store.DesignPrefix) || strings.HasPrefix(d.ID, store.LocalPrefix) {
		return nil
	}
	var old []byte
	if cur, err := dv.db.Get(ctx, d.ID, store.GetOptions{}); err == nil {
		old, _ = cur.MarshalJSON()
	}
	err := dv.v.Validate(renderDocForHook(d), old, dv.userCtx, dv.secObj)
	if err == nil {
		return nil
	}
	var rej *jsfilter.Rejection
	if errors.As(err, &rej) {
		return &store.Error{Status: rej.Status, Err: rej.Err, Reason: rej.Reason}
	}
	return &store.Error{Status: 500, Err: "os_process_error", Reason: err.Error()}
}
