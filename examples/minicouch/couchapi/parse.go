package couchapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/store"
)

// replicationFields are the special members CouchDB keeps in the body of
// replication documents (couch_doc's transfer_fields): the replicator
// writes them into `_replicator` docs.
var replicationFields = map[string]bool{
	"_replication_state":        true,
	"_replication_state_time":   true,
	"_replication_state_reason": true,
	"_replication_id":           true,
	"_replication_stats":        true,
}

// parseDoc is store.ParseDoc plus two CouchDB allowances: the
// `_replication_*` members stay in the doc body (at the end of the body
// members), and when `_revisions` is given a disagreeing `_rev` is ignored
// (CouchDB takes the revision from `_revisions`).
func parseDoc(raw []byte) (*store.Doc, error) {
	d, err := parseDocMembers(raw)
	if err != nil {
		return nil, err
	}
	// CouchDB computes the digest of inline attachment data itself and
	// ignores a digest sent along (clients often keep a stale one).
	for i, a := range d.Attachments {
		if !a.Stub && !a.Follows {
			d.Attachments[i].Digest = ""
		}
	}
	return d, nil
}

// parseDocMembers does parseDoc's work on the JSON members.
func parseDocMembers(raw []byte) (*store.Doc, error) {
	if !bytes.Contains(raw, []byte(`"_replication_`)) {
		d, err := store.ParseDoc(raw)
		if err == nil || !bytes.Contains(raw, []byte(`"_revisions"`)) {
			return d, err
		}
		if se, ok := err.(*store.Error); !ok || !strings.Contains(se.Reason, "_revisions") {
			return d, err
		}
	}
	hasRevisions := bytes.Contains(raw, []byte(`"_revisions"`))
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return store.ParseDoc(raw)
	}
	rest := []byte{'{'}
	var extra []byte
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return store.ParseDoc(raw)
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return store.ParseDoc(raw)
		}
		member := append(appendJSONString(nil, key), ':')
		member = append(member, v...)
		if key == "_rev" && hasRevisions {
			continue
		}
		if replicationFields[key] {
			extra = append(append(extra, ','), member...)
			continue
		}
		if len(rest) > 1 {
			rest = append(rest, ',')
		}
		rest = append(rest, member...)
	}
	rest = append(rest, '}')
	d, err := store.ParseDoc(rest)
	if err != nil || len(extra) == 0 {
		if err == nil && d.Revisions != nil && d.Rev == "" {
			d.Rev = strconv.Itoa(d.Revisions.Start) + "-" + d.Revisions.IDs[0]
		}
		return d, err
	}
	if d.Revisions != nil && d.Rev == "" {
		d.Rev = strconv.Itoa(d.Revisions.Start) + "-" + d.Revisions.IDs[0]
	}
	body := strings.TrimSpace(string(d.Body))
	inner := strings.TrimSpace(body[1 : len(body)-1])
	if inner == "" {
		extra = extra[1:]
	}
	d.Body = []byte("{" + inner + string(extra) + "}")
	return d, nil
}
