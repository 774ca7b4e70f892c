package host

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/couchepi/couchepi/hooks"
)

// memServer is a small real in-memory CouchDB-like server for the tests: it
// calls the host on its write and read paths like any server embedding it,
// and implements hooks.Services so plugins can read changes and write docs.
type memServer struct {
	host *Host

	mu  sync.Mutex
	dbs map[string]*memDB
	// changesErr makes reading a db's changes fail, as a server whose
	// storage for that db is failing.
	changesErr map[string]error
}

type memDB struct {
	uuid string
	seq  int
	docs map[string]*memDoc
}

type memDoc struct {
	gen     int
	rev     string
	body    []byte
	deleted bool
	seq     int
}

func newMemServer() *memServer { return &memServer{dbs: map[string]*memDB{}} }

func (s *memServer) createDB(name string) {
	s.mu.Lock()
	uuid := fmt.Sprintf("%032x", md5.Sum([]byte(name)))
	s.dbs[name] = &memDB{uuid: uuid, docs: map[string]*memDoc{}}
	s.mu.Unlock()
	s.host.AfterDBCreate(name, uuid)
}

// failChanges makes reading db's changes fail with err (nil: succeed again).
func (s *memServer) failChanges(db string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changesErr == nil {
		s.changesErr = map[string]error{}
	}
	s.changesErr[db] = err
}

func (s *memServer) deleteDB(name string) {
	s.mu.Lock()
	db := s.dbs[name]
	delete(s.dbs, name)
	s.mu.Unlock()
	if db != nil {
		s.host.AfterDBDelete(name, db.uuid)
	}
}

// put writes doc to db as user, running before_doc_update and then
// after_doc_write like a real server.
func (s *memServer) put(ctx context.Context, dbName string, doc []byte, user hooks.UserCtx) (string, error) {
	if s.host.Subscribed(hooks.BeforeDocUpdate, dbName) {
		var err error
		if doc, err = s.host.BeforeDocUpdate(ctx, dbName, doc, user); err != nil {
			return "", err
		}
	}
	ev, err := s.store(dbName, doc)
	if err != nil {
		return "", err
	}
	s.host.AfterDocWrite(ev)
	s.host.DBUpdated(ev.DB, ev.Seq)
	return ev.Rev, nil
}

// store writes doc to db without any hook and returns the write's event.
func (s *memServer) store(dbName string, doc []byte) (hooks.DocWrite, error) {
	var body map[string]any
	if err := json.Unmarshal(doc, &body); err != nil {
		return hooks.DocWrite{}, &hooks.Error{Status: 400, Err: "bad_request", Reason: "Document must be a JSON object"}
	}
	id, _ := body["_id"].(string)
	if id == "" {
		return hooks.DocWrite{}, &hooks.Error{Status: 400, Err: "bad_request", Reason: "missing _id"}
	}
	prev, _ := body["_rev"].(string)
	deleted, _ := body["_deleted"].(bool)
	s.mu.Lock()
	db := s.dbs[dbName]
	if db == nil {
		s.mu.Unlock()
		return hooks.DocWrite{}, hooks.NotFound("Database does not exist.")
	}
	cur := db.docs[id]
	if (cur == nil && prev != "") || (cur != nil && cur.rev != prev && !(cur.deleted && prev == "")) {
		s.mu.Unlock()
		return hooks.DocWrite{}, hooks.Conflict()
	}
	gen := 1
	if cur != nil {
		gen = cur.gen + 1
	}
	rev := fmt.Sprintf("%d-%x", gen, md5.Sum(doc))
	body["_rev"] = rev
	stored, _ := json.Marshal(body)
	db.seq++
	d := &memDoc{gen: gen, rev: rev, body: stored, deleted: deleted, seq: db.seq}
	db.docs[id] = d
	uuid, seq := db.uuid, db.seq
	s.mu.Unlock()
	return hooks.DocWrite{DB: dbName, DBUUID: uuid, DocID: id, Rev: rev,
		Seq: strconv.Itoa(seq), Deleted: deleted, Doc: stored}, nil
}

// get reads a doc as user, running after_doc_read.
func (s *memServer) get(ctx context.Context, db, id string, user hooks.UserCtx) ([]byte, error) {
	doc, err := s.GetDoc(ctx, db, id)
	if err != nil {
		return nil, err
	}
	if s.host.Subscribed(hooks.AfterDocRead, db) {
		return s.host.AfterDocRead(ctx, db, doc, user)
	}
	return doc, nil
}

func (s *memServer) ServerInfo(context.Context) (hooks.ServerInfo, error) {
	return hooks.ServerInfo{UUID: "0123456789abcdef0123456789abcdef", Version: "3.5.0", Vendor: "memserver",
		Node: "nonode@nohost", URL: "http://127.0.0.1:5984/"}, nil
}

func (s *memServer) ListDBs(context.Context) ([]hooks.DBInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []hooks.DBInfo
	for name, db := range s.dbs {
		out = append(out, hooks.DBInfo{Name: name, UUID: db.uuid, UpdateSeq: strconv.Itoa(db.seq)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *memServer) Changes(_ context.Context, dbName, since string, limit int) (hooks.ChangesPage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	db := s.dbs[dbName]
	if db == nil {
		return hooks.ChangesPage{}, hooks.NotFound("Database does not exist.")
	}
	if err := s.changesErr[dbName]; err != nil {
		return hooks.ChangesPage{}, err
	}
	from := 0
	if since != "" {
		n, err := strconv.Atoi(since)
		if err != nil {
			return hooks.ChangesPage{}, &hooks.Error{Status: 400, Err: "bad_request", Reason: "Malformed sequence supplied in 'since' parameter."}
		}
		from = n
	}
	var rows []hooks.Change
	for id, d := range db.docs {
		if d.seq > from {
			rows = append(rows, hooks.Change{Seq: strconv.Itoa(d.seq), ID: id, Revs: []string{d.rev}, Deleted: d.deleted})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, _ := strconv.Atoi(rows[i].Seq)
		b, _ := strconv.Atoi(rows[j].Seq)
		return a < b
	})
	page := hooks.ChangesPage{LastSeq: strconv.Itoa(from)}
	if limit > 0 && len(rows) > limit {
		page.Pending = int64(len(rows) - limit)
		rows = rows[:limit]
	}
	page.Results = rows
	if len(rows) > 0 {
		page.LastSeq = rows[len(rows)-1].Seq
	}
	return page, nil
}

func (s *memServer) GetDoc(_ context.Context, dbName, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	db := s.dbs[dbName]
	if db == nil {
		return nil, hooks.NotFound("Database does not exist.")
	}
	d := db.docs[id]
	if d == nil {
		return nil, hooks.NotFound("missing")
	}
	if d.deleted {
		return nil, hooks.NotFound("deleted")
	}
	return d.body, nil
}

func (s *memServer) UpdateDoc(ctx context.Context, db string, doc []byte) (string, error) {
	return s.put(ctx, db, doc, hooks.SystemUser())
}
