package couchapi

import (
	"bytes"
	"encoding/json"
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

// parseDoc is store.ParseDoc plus CouchDB's allowance for the
// `_replication_*` members, which stay in the doc body in their place at
// the end of the body members.
func parseDoc(raw []byte) (*store.Doc, error) {
	if !bytes.Contains(raw, []byte(`"_replication_`)) {
		return store.ParseDoc(raw)
	}
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
		return d, err
	}
	body := strings.TrimSpace(string(d.Body))
	inner := strings.TrimSpace(body[1 : len(body)-1])
	if inner == "" {
		extra = extra[1:]
	}
	d.Body = []byte("{" + inner + string(extra) + "}")
	return d, nil
}
