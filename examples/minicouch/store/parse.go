package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/couchepi/couchepi/examples/minicouch/revtree"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/internal/jsonscan"
)

// LocalPrefix starts the ids of _local documents.
const LocalPrefix = "_local/"

// DesignPrefix starts the ids of design documents.
const DesignPrefix = "_design/"

// MaxDocIDLength bounds document ids in bytes (the storage engine's keys
// must stay below 32 KiB; CouchDB's own default is unbounded).
const MaxDocIDLength = 16 << 10

// ValidateDocID checks a document id by CouchDB's rules: non-empty, UTF-8,
// and starting with "_" only for _design/ and _local/ documents; and at
// most MaxDocIDLength bytes.
func ValidateDocID(id string) error {
	switch {
	case id == "":
		return IllegalDocID("Document id must not be empty")
	case len(id) > MaxDocIDLength:
		return IllegalDocID("Document id is too long")
	case !utf8.ValidString(id):
		return IllegalDocID("Document id must be valid UTF-8")
	case id[0] == '_' && !strings.HasPrefix(id, DesignPrefix) && !strings.HasPrefix(id, LocalPrefix):
		return IllegalDocID("Only reserved document ids may start with underscore.")
	}
	return nil
}

// replicationMembers are the special members CouchDB keeps in a
// document's body (couch_doc's transfer_fields): the replicator records a
// replication's state in its _replicator document with them.
var replicationMembers = map[string]bool{
	"_replication_state":        true,
	"_replication_state_time":   true,
	"_replication_state_reason": true,
	"_replication_id":           true,
	"_replication_stats":        true,
}

// ParseDoc parses a document body as a client sends it (PUT, POST,
// _bulk_docs) with CouchDB's rules for special members: _id, _rev,
// _deleted, _revisions and _attachments are taken; _revs_info, _conflicts,
// _deleted_conflicts and _local_seq are ignored; the _replication_* members
// of replication documents stay in the body where they were; any other
// member starting with "_" is a doc_validation error. The id, when present,
// is validated. When _revisions is given it names the revision and a _rev
// member is ignored, as CouchDB does; a bare "<gen>-" rev is accepted.
func ParseDoc(raw []byte) (*Doc, error) {
	if !json.Valid(raw) {
		if jsonscan.TooDeep(raw) {
			return nil, BadRequest(jsonobj.ErrTooDeep.Error())
		}
		return nil, BadRequest("invalid UTF-8 JSON")
	}
	return ParseValidDoc(raw)
}

// ParseValidDoc is ParseDoc for a body already known to be valid JSON (an
// element of a _bulk_docs body validated as a whole): it skips the second
// validation pass, which is a large part of the cost of ingesting a batch.
func ParseValidDoc(raw []byte) (*Doc, error) {
	return parseValidDoc(raw, make([]byte, 0, len(raw)))
}

// ParseValidDocInPlace is ParseValidDoc that builds the document's body in
// raw's own memory instead of a new buffer (the body is never longer than
// raw, and each member is moved back over bytes already read). raw must not
// be used afterwards, whatever the outcome; the returned Body is capped at
// its length, so appending to it never reaches bytes after raw. _bulk_docs
// uses it on the docs of its request body, which is read once and dropped:
// a copy of every document body fewer per write.
func ParseValidDocInPlace(raw []byte) (*Doc, error) {
	raw = raw[jsonscan.SkipSpace(raw, 0):]
	if len(raw) == 0 || raw[0] != '{' {
		// Not an object: the error comes from the copying parser (writing
		// the body's "{" over raw[0] would change what it parses).
		return ParseValidDoc(raw)
	}
	return parseValidDoc(raw, raw[:0])
}

// parseValidDoc parses the valid JSON document raw, appending its body
// to body (empty; raw[:0] builds it in place).
//
// Whitespace between the top-level members goes with the member
// separators; whitespace inside an object or array value kept in the body
// is compacted value by value (compactValid), so only such values are
// scanned a second time, not the whole document.
func parseValidDoc(raw, body []byte) (*Doc, error) {
	d := &Doc{}
	body = append(body, '{')
	err := jsonscan.Members(raw, func(rawKey, val []byte) error {
		// Keys are compared as bytes (no string per member); only a key
		// with escapes is decoded. A key starts with "_" only when its
		// first byte is "_" or starts an escape.
		k := rawKey[1 : len(rawKey)-1]
		if len(k) > 0 && (k[0] == '_' || k[0] == '\\') && bytes.IndexByte(k, '\\') >= 0 {
			key, err := jsonscan.Unquote(rawKey)
			if err != nil {
				return err
			}
			k = []byte(key)
		}
		if len(k) == 0 || k[0] != '_' || replicationMembers[string(k)] {
			if val[0] == '{' || val[0] == '[' {
				val = compactValid(val)
			}
			if len(body) > 1 {
				body = append(body, ',')
			}
			body = append(body, rawKey...)
			body = append(body, ':')
			body = append(body, val...)
			return nil
		}
		switch string(k) {
		case "_id":
			id, err := jsonString(val)
			if err != nil {
				return BadRequest("Document id must be a string")
			}
			if err := ValidateDocID(id); err != nil {
				return err
			}
			d.ID = id
		case "_rev":
			if d.Revisions != nil {
				return nil // _revisions already named the revision
			}
			rev, err := jsonString(val)
			if err != nil {
				return BadRequest("Invalid rev format")
			}
			if !strings.HasPrefix(d.ID, LocalPrefix) && !strings.HasPrefix(rev, "0-") {
				if _, err := revtree.ParseRev(rev); err != nil {
					return BadRequest("Invalid rev format")
				}
			}
			d.Rev = rev
		case "_deleted":
			switch string(val) {
			case "true":
				d.Deleted = true
			case "false":
				d.Deleted = false
			default:
				return DocValidation("Bad special document member: _deleted")
			}
		case "_revisions":
			r, err := parseRevisions(val)
			if err != nil {
				return err
			}
			d.Revisions = r
			d.Rev = revtree.Rev{Gen: r.Start, Hash: r.IDs[0]}.String()
		case "_attachments":
			atts, err := parseAttachments(val)
			if err != nil {
				return err
			}
			d.Attachments = atts
		case "_revs_info", "_conflicts", "_deleted_conflicts", "_local_seq":
		default:
			return DocValidation("Bad special document member: " + string(k))
		}
		return nil
	})
	if err == jsonscan.ErrNotObject {
		return nil, BadRequest("Document must be a JSON object")
	}
	if err != nil {
		return nil, err
	}
	body = append(body, '}')
	d.Body = body[:len(body):len(body)]
	return d, nil
}

// jsonString decodes the valid JSON value val if it is a string.
func jsonString(val []byte) (string, error) {
	if len(val) == 0 || val[0] != '"' {
		return "", errNotString
	}
	return jsonscan.Unquote(val)
}

// errNotString is jsonString's error for a value that is not a string.
var errNotString = errors.New("not a JSON string")

// parseRevisions parses a _revisions member, {"start":N,"ids":[…]}, with
// CouchDB's doc_validation errors for a malformed one. val is valid JSON.
func parseRevisions(val []byte) (*Revisions, error) {
	if val[0] != '{' {
		return nil, DocValidation("Bad special document member: _revisions")
	}
	var start, ids []byte
	jsonscan.Members(val, func(rawKey, v []byte) error {
		k := rawKey[1 : len(rawKey)-1]
		if bytes.IndexByte(k, '\\') >= 0 {
			key, _ := jsonscan.Unquote(rawKey)
			k = []byte(key)
		}
		switch string(k) {
		case "start":
			start = v
		case "ids":
			ids = v
		}
		return nil
	})
	r := &Revisions{}
	n, err := strconv.Atoi(string(start))
	if len(start) == 0 || start[0] != '-' && (start[0] < '0' || start[0] > '9') || err != nil {
		return nil, DocValidation("_revisions.start isn't an integer.")
	}
	r.Start = n
	if len(ids) == 0 || ids[0] != '[' {
		return nil, DocValidation("_revisions.ids isn't a array.")
	}
	for i := jsonscan.SkipSpace(ids, 1); i < len(ids) && ids[i] != ']'; {
		e := jsonscan.SkipValue(ids, i)
		id := ids[i:e]
		if id[0] != '"' {
			return nil, DocValidation("RevId isn't a string")
		}
		s, err := jsonscan.Unquote(id)
		if err != nil {
			return nil, DocValidation("RevId isn't a string")
		}
		r.IDs = append(r.IDs, s)
		i = jsonscan.SkipSpace(ids, e)
		if i < len(ids) && ids[i] == ',' {
			i = jsonscan.SkipSpace(ids, i+1)
		}
	}
	if r.IDs == nil {
		r.IDs = []string{}
	}
	if r.Start < 1 || len(r.IDs) == 0 || len(r.IDs) > r.Start {
		return nil, BadRequest("_revisions must be an object with a positive start and non-empty ids")
	}
	return r, nil
}

type rawAttachment struct {
	ContentType   *string `json:"content_type"`
	Data          *string `json:"data"`
	Stub          bool    `json:"stub"`
	Follows       bool    `json:"follows"`
	Digest        string  `json:"digest"`
	Length        int64   `json:"length"`
	RevPos        int     `json:"revpos"`
	Encoding      string  `json:"encoding"`
	EncodedLength int64   `json:"encoded_length"`
}

func parseAttachments(val []byte) ([]Attachment, error) {
	var atts []Attachment
	err := eachMember(val, func(name string, _, v []byte) error {
		if strings.HasPrefix(name, "_") {
			return BadRequest("Attachment name '" + name + "' starts with prohibited character '_'")
		}
		if !utf8.ValidString(name) || name == "" {
			return BadRequest("Attachment name is not UTF-8 encoded")
		}
		// The inline data, often most of the object, is cut out and
		// decoded straight from the request's bytes: encoding/json spent
		// more on checking and unquoting it than the rest of the write.
		data, rest, cut := cutInlineData(v)
		var ra rawAttachment
		if err := json.Unmarshal(rest, &ra); err != nil {
			return BadRequest("Invalid attachment " + name)
		}
		if cut {
			ra.Data = nil
		}
		a := Attachment{Name: name, Stub: ra.Stub, Follows: ra.Follows, Digest: ra.Digest,
			Length: ra.Length, RevPos: ra.RevPos, Encoding: ra.Encoding, EncodedLength: ra.EncodedLength}
		if a.Encoding == "identity" {
			a.Encoding = ""
		}
		if ra.ContentType != nil {
			a.ContentType = *ra.ContentType
		} else {
			a.ContentType = "application/octet-stream"
		}
		switch {
		case ra.Stub:
		case ra.Follows:
		case cut || ra.Data != nil:
			var err error
			if !cut {
				data, err = base64.StdEncoding.DecodeString(*ra.Data)
			}
			if err != nil {
				return BadRequest("Invalid attachment data for " + name)
			}
			a.Data = data
			// inline data is always unencoded (CouchDB ignores an
			// "encoding" next to "data")
			a.Encoding, a.EncodedLength = "", 0
		default:
			return BadRequest("Attachment " + name + " has no data, stub or follows")
		}
		atts = append(atts, a)
		return nil
	})
	if err == jsonscan.ErrNotObject {
		return nil, BadRequest("_attachments must be an object")
	}
	return atts, err
}

// cutInlineData takes the inline "data" string out of the valid JSON
// attachment object obj and decodes it from base64: it returns the data,
// the object without that member, and true. It leaves obj whole (false)
// when encoding/json could read the member otherwise: a key with escapes
// or in other case ("Data" sets the same field), a data member that is not
// a string or has escapes, or data that is not base64 (whose error then
// comes from the usual path).
func cutInlineData(obj []byte) ([]byte, []byte, bool) {
	var raw []byte
	found, other := 0, false
	err := jsonscan.Members(obj, func(rawKey, val []byte) error {
		k := rawKey[1 : len(rawKey)-1]
		switch {
		case string(k) == "data":
			found++
			raw = val
		case bytes.IndexByte(k, '\\') >= 0 || bytes.EqualFold(k, []byte("data")):
			other = true
		}
		return nil
	})
	if err != nil || found != 1 || other || len(raw) < 2 || raw[0] != '"' || bytes.IndexByte(raw, '\\') >= 0 {
		return nil, obj, false
	}
	b64 := raw[1 : len(raw)-1]
	data := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, err := base64.StdEncoding.Decode(data, b64)
	if err != nil {
		return nil, obj, false
	}
	rest := make([]byte, 0, len(obj)-len(raw)+2)
	rest = append(rest, '{')
	_ = jsonscan.Members(obj, func(rawKey, val []byte) error {
		if string(rawKey) == `"data"` {
			return nil
		}
		if len(rest) > 1 {
			rest = append(rest, ',')
		}
		rest = append(append(append(rest, rawKey...), ':'), val...)
		return nil
	})
	return data[:n], append(rest, '}'), true
}
