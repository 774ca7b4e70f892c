package couchapi

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/couchepi/couchepi/hooks"
)

var dbNameRE = regexp.MustCompile(`^[a-z][a-z0-9_$()+/-]*$`)

// systemDBs are the reserved names allowed despite the leading underscore.
var systemDBs = map[string]bool{"_users": true, "_replicator": true, "_global_changes": true}

// validDBName applies CouchDB's database name rule.
func validDBName(name string) bool {
	if len(name) > 238 {
		return false
	}
	if systemDBs[name] {
		return true
	}
	if strings.HasSuffix(name, "/_replicator") || strings.HasSuffix(name, "/_users") {
		i := strings.LastIndex(name, "/")
		return dbNameRE.MatchString(name[:i])
	}
	return dbNameRE.MatchString(name)
}

func illegalDBName(name string) *hooks.Error {
	return &hooks.Error{Status: 400, Err: "illegal_database_name", Reason: "Name: '" + name +
		"'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), +, -, and / are allowed. Must begin with a letter."}
}

// isUsersDB reports whether db is an authentication db.
func isUsersDB(db string) bool { return db == "_users" || strings.HasSuffix(db, "/_users") }

// isReplicatorDB reports whether db is a replicator db.
func isReplicatorDB(db string) bool {
	return db == "_replicator" || strings.HasSuffix(db, "/_replicator")
}

// validateDocID applies CouchDB's doc id rules for writes.
func validateDocID(id string) *hooks.Error {
	if id == "" {
		return &hooks.Error{Status: 400, Err: "illegal_docid", Reason: "Document id must not be empty"}
	}
	if !utf8.ValidString(id) {
		return &hooks.Error{Status: 400, Err: "illegal_docid", Reason: "Document id must be valid UTF-8"}
	}
	if strings.HasPrefix(id, "_") {
		switch {
		case strings.HasPrefix(id, "_design/") && len(id) > len("_design/"):
		case strings.HasPrefix(id, "_local/") && len(id) > len("_local/"):
		default:
			return errUnderscoreID
		}
	}
	return nil
}

// errDocIDTooLong is CouchDB's answer to an id above `[couchdb]
// max_document_id_length`.
var errDocIDTooLong = &hooks.Error{Status: 400, Err: "illegal_docid", Reason: "Document id is too long"}

// maxDocIDLength is `[couchdb] max_document_id_length` in bytes, read at
// every write as CouchDB does; 0 when unbounded (CouchDB's default
// "infinity", and any value that is not a positive integer). The store's
// own bound, store.MaxDocIDLength, holds whatever it says.
func maxDocIDLength(cfg *config.Config) int {
	n, err := strconv.Atoi(strings.TrimSpace(cfg.GetDefault("couchdb", "max_document_id_length", "infinity")))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// checkDocID is validateDocID with the configured length bound.
func (s *Server) checkDocID(id string) *hooks.Error {
	if herr := validateDocID(id); herr != nil {
		return herr
	}
	if max := maxDocIDLength(s.cfg); max > 0 && len(id) > max {
		return errDocIDTooLong
	}
	return nil
}
