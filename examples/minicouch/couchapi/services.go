package couchapi

import (
	"context"
	"errors"

	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
)

// Server implements the services the host offers to plugins.
var _ hooks.Services = (*Server)(nil)

// ServerInfo reports the server's uuid, version, vendor, node and URL.
func (s *Server) ServerInfo(ctx context.Context) (hooks.ServerInfo, error) {
	uuid, _ := s.cfg.Get("couchdb", "uuid")
	return hooks.ServerInfo{UUID: uuid, Version: Version, Vendor: Vendor, Node: s.node, URL: s.url}, nil
}

// ListDBs lists every database with its uuid and update seq.
func (s *Server) ListDBs(ctx context.Context) ([]hooks.DBInfo, error) {
	names, err := s.store.ListDBs()
	if err != nil {
		return nil, err
	}
	out := make([]hooks.DBInfo, 0, len(names))
	for _, n := range names {
		db, err := s.store.DB(n)
		if err != nil {
			continue
		}
		out = append(out, hooks.DBInfo{Name: n, UUID: db.UUID(), UpdateSeq: s.seqs.format(db.UpdateSeq(), db.UUID())})
	}
	return out, nil
}

func (s *Server) openDB(name string) (*store.DB, error) {
	db, err := s.store.DB(name)
	if err != nil {
		return nil, errDBMissing
	}
	return db, nil
}

// Changes reads one page of db's changes feed (all_docs style) after since.
func (s *Server) Changes(ctx context.Context, dbName, since string, limit int) (hooks.ChangesPage, error) {
	db, err := s.openDB(dbName)
	if err != nil {
		return hooks.ChangesPage{}, err
	}
	from, ok := parseSince(since, db.UpdateSeq(), db.UUID())
	if !ok {
		return hooks.ChangesPage{}, errBadSince
	}
	page := hooks.ChangesPage{Results: []hooks.Change{}}
	res, err := db.Changes(ctx, store.ChangesOptions{Since: from, Limit: limit}, func(ch store.Change) error {
		page.Results = append(page.Results, hooks.Change{
			Seq: s.seqs.format(ch.Seq, db.UUID()), ID: ch.ID, Revs: ch.Revs, Deleted: ch.Deleted,
		})
		return nil
	})
	if err != nil {
		return hooks.ChangesPage{}, asCouchError(err)
	}
	page.LastSeq = s.seqs.format(res.LastSeq, db.UUID())
	page.Pending = res.Pending
	return page, nil
}

// GetDoc reads the winning revision of a doc (404 not_found when missing
// or deleted).
func (s *Server) GetDoc(ctx context.Context, dbName, docID string) ([]byte, error) {
	db, err := s.openDB(dbName)
	if err != nil {
		return nil, err
	}
	doc, err := db.Get(ctx, docID, store.GetOptions{})
	if err != nil {
		if errors.Is(err, store.ErrDeleted) || errors.Is(err, store.ErrNotFound) {
			return nil, asCouchError(err)
		}
		return nil, asCouchError(err)
	}
	return doc.MarshalJSON()
}

// UpdateDoc writes a doc as the system user through the full write path
// (before_doc_update included) and returns the new rev.
func (s *Server) UpdateDoc(ctx context.Context, dbName string, doc []byte) (string, error) {
	db, err := s.openDB(dbName)
	if err != nil {
		return "", err
	}
	d, err := parseDoc(doc)
	if err != nil {
		return "", asCouchError(err)
	}
	if d.ID == "" {
		return "", badRequest("Document id must be a string")
	}
	res, err := s.writeDocs(ctx, db, []*store.Doc{d}, writeOpts{newEdits: true, user: hooks.SystemUser()})
	if err != nil {
		return "", asCouchError(err)
	}
	if res[0].Err != nil {
		return "", asCouchError(res[0].Err)
	}
	return res[0].Rev, nil
}

// EnsureSystemDBs creates `_users` and `_replicator` when they are missing,
// as a CouchDB single node does after setup.
func (s *Server) EnsureSystemDBs(ctx context.Context) error {
	for _, name := range []string{"_users", "_replicator"} {
		if s.store.Exists(name) {
			continue
		}
		db, err := s.store.CreateDB(name)
		if err != nil && !errors.Is(err, store.ErrDBExists) {
			return err
		}
		if db != nil {
			if err := db.SetSecurity(ctx, defaultSecurity); err != nil {
				return err
			}
			s.log.Info("system database created", "db", name)
			if s.hooks != nil {
				s.hooks.AfterDBCreate(name, db.UUID())
			}
		}
	}
	return nil
}
