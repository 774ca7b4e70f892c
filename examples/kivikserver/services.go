package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"sync"

	"github.com/couchepi/couchepi/hooks"
	"github.com/go-kivik/kivik/v4"
)

// services is hooks.Services over a kivik.Client: what the plugins ask of
// the server, answered through kivik's driver API rather than the HTTP
// layer, which (x/server v4.5.2) cannot write a doc by id.
//
// A kivik driver need not expose update sequences or db uuids (memorydb
// has neither, nor a changes feed), so services keeps both itself: each db
// gets a uuid the first time it is seen (a new one when it is recreated
// through the server), and every write the server makes through writes or
// UpdateDoc gets the db's next sequence number. Changes since "0" lists
// every doc (so a catch-up after a restart, or for writes made behind the
// server's back, re-reads the whole db); since N it lists the docs written
// after N. Both numbers live in memory: after a restart every db has a new
// uuid, which tells the replicator to re-read it from the start.
type services struct {
	client *kivik.Client
	host   interface {
		BeforeDocUpdate(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error)
		AfterDocWrite(ev hooks.DocWrite)
	}
	info hooks.ServerInfo

	mu   sync.Mutex
	dbs  map[string]*dbLog
	uuid func() string
}

// dbLog is what services knows of one db's history.
type dbLog struct {
	uuid    string
	seq     uint64
	written map[string]uint64 // doc id -> seq of its last write
}

func newServices(client *kivik.Client, info hooks.ServerInfo) *services {
	return &services{client: client, info: info, dbs: map[string]*dbLog{}, uuid: randomUUID}
}

func randomUUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// log returns db's history, started on first sight.
func (s *services) log(db string) *dbLog {
	l := s.dbs[db]
	if l == nil {
		l = &dbLog{uuid: s.uuid(), written: map[string]uint64{}}
		s.dbs[db] = l
	}
	return l
}

// dbCreated starts a new history for db and returns its uuid.
func (s *services) dbCreated(db string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.dbs, db)
	return s.log(db).uuid
}

// dbDeleted forgets db and returns the uuid it had.
func (s *services) dbDeleted(db string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	uuid := s.log(db).uuid
	delete(s.dbs, db)
	return uuid
}

// written records a write of doc id in db and returns its event: the
// doc's winning revision as the driver now has it.
func (s *services) written(ctx context.Context, db, id string) (hooks.DocWrite, error) {
	s.mu.Lock()
	l := s.log(db)
	l.seq++
	l.written[id] = l.seq
	ev := hooks.DocWrite{DB: db, DBUUID: l.uuid, DocID: id, Seq: strconv.FormatUint(l.seq, 10)}
	s.mu.Unlock()
	body, rev, err := s.read(ctx, db, id)
	var he *hooks.Error
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		ev.Deleted = true
		ev.Doc, _ = json.Marshal(map[string]any{"_id": id, "_deleted": true})
		return ev, nil
	}
	if err != nil {
		return ev, err
	}
	ev.Rev, ev.Doc = rev, body
	return ev, nil
}

// read returns a doc's winning revision with _id and _rev, and the rev.
func (s *services) read(ctx context.Context, db, id string) ([]byte, string, error) {
	row := s.client.DB(db).Get(ctx, id)
	var doc map[string]any
	if err := row.ScanDoc(&doc); err != nil {
		return nil, "", couchError(err)
	}
	rev, _ := row.Rev()
	doc["_id"], doc["_rev"] = id, rev
	b, err := json.Marshal(doc)
	return b, rev, err
}

// ServerInfo describes this server.
func (s *services) ServerInfo(context.Context) (hooks.ServerInfo, error) { return s.info, nil }

// ListDBs lists the driver's dbs with the uuids services gave them.
func (s *services) ListDBs(ctx context.Context) ([]hooks.DBInfo, error) {
	names, err := s.client.AllDBs(ctx)
	if err != nil {
		return nil, couchError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]hooks.DBInfo, len(names))
	for i, n := range names {
		l := s.log(n)
		out[i] = hooks.DBInfo{Name: n, UUID: l.uuid, UpdateSeq: strconv.FormatUint(l.seq, 10)}
	}
	return out, nil
}

// Changes lists db's changes after since (see services).
func (s *services) Changes(ctx context.Context, db, since string, limit int) (hooks.ChangesPage, error) {
	s.mu.Lock()
	l := s.log(db)
	last := l.seq
	var after uint64
	if since != "" && since != "0" {
		n, err := strconv.ParseUint(since, 10, 64)
		if err != nil || n > last {
			s.mu.Unlock()
			return hooks.ChangesPage{}, &hooks.Error{Status: 400, Err: "bad_request", Reason: "Invalid since: " + since}
		}
		after = n
	}
	type row struct {
		id  string
		seq uint64
	}
	var rows []row
	if after > 0 {
		for id, seq := range l.written {
			if seq > after {
				rows = append(rows, row{id, seq})
			}
		}
	}
	s.mu.Unlock()
	if after == 0 {
		ids, err := s.allDocIDs(ctx, db)
		if err != nil {
			return hooks.ChangesPage{}, err
		}
		s.mu.Lock()
		for _, id := range ids {
			seq := l.written[id]
			if seq == 0 {
				seq = last // not written through this server: as of now
			}
			rows = append(rows, row{id, seq})
		}
		s.mu.Unlock()
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].seq < rows[j].seq || rows[i].seq == rows[j].seq && rows[i].id < rows[j].id
	})
	page := hooks.ChangesPage{LastSeq: strconv.FormatUint(last, 10)}
	// A listing from "0" is one page: docs never written through this
	// server share one seq, which cannot mark a place between them.
	if after > 0 && limit > 0 && len(rows) > limit {
		page.Pending = int64(len(rows) - limit)
		page.LastSeq = strconv.FormatUint(rows[limit-1].seq, 10)
		rows = rows[:limit]
	}
	for _, r := range rows {
		c := hooks.Change{Seq: strconv.FormatUint(r.seq, 10), ID: r.id}
		if _, rev, err := s.read(ctx, db, r.id); err == nil {
			c.Revs = []string{rev}
		} else {
			c.Deleted = true
		}
		page.Results = append(page.Results, c)
	}
	return page, nil
}

// allDocIDs lists db's doc ids (not _local docs).
func (s *services) allDocIDs(ctx context.Context, db string) ([]string, error) {
	rs := s.client.DB(db).AllDocs(ctx)
	defer rs.Close()
	var ids []string
	for rs.Next() {
		id, err := rs.ID()
		if err != nil {
			return nil, couchError(err)
		}
		ids = append(ids, id)
	}
	return ids, couchError(rs.Err())
}

// GetDoc reads a doc's winning revision.
func (s *services) GetDoc(ctx context.Context, db, id string) ([]byte, error) {
	b, _, err := s.read(ctx, db, id)
	return b, err
}

// UpdateDoc writes doc as the system user: before_doc_update runs first,
// after_doc_write once the driver has it, as for a write over HTTP.
func (s *services) UpdateDoc(ctx context.Context, db string, doc []byte) (string, error) {
	out, err := s.host.BeforeDocUpdate(ctx, db, doc, hooks.SystemUser())
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		return "", &hooks.Error{Status: 400, Err: "bad_request", Reason: "invalid UTF-8 JSON"}
	}
	id, _ := m["_id"].(string)
	if id == "" {
		return "", &hooks.Error{Status: 400, Err: "bad_request", Reason: "Document must have an _id"}
	}
	rev, err := s.client.DB(db).Put(ctx, id, m)
	if err != nil {
		return "", couchError(err)
	}
	if ev, err := s.written(ctx, db, id); err == nil {
		s.host.AfterDocWrite(ev)
	}
	return rev, nil
}

// couchError turns a kivik error into the *hooks.Error a plugin expects.
func couchError(err error) error {
	if err == nil {
		return nil
	}
	status := kivik.HTTPStatus(err)
	switch status {
	case http.StatusNotFound:
		return hooks.NotFound("missing")
	case http.StatusConflict:
		return hooks.Conflict()
	}
	if status < 400 {
		status = http.StatusInternalServerError
	}
	return &hooks.Error{Status: status, Err: "error", Reason: err.Error()}
}
