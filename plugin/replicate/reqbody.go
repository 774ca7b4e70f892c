package replicate

import (
	"encoding/json"
)

// The _bulk_get request of every batch names up to worker_batch_size
// (id, rev) pairs; encoding it with encoding/json (reflection over a map
// and a slice of structs) was ~7% of the replicator's CPU. The body is
// built here with appends instead, byte for byte what json.Marshal gives.

// appendJSONString appends s as a JSON string exactly as encoding/json
// encodes it: printable ASCII other than the quote, the backslash and
// json.Marshal's HTML escapes (<, > and &) is copied; anything else (ids
// rarely have it) goes through json.Marshal.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			enc, _ := json.Marshal(s)
			return append(buf, enc...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// jsonPlain marks the bytes appendJSONString copies as they are.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	t['"'], t['\\'], t['<'], t['>'], t['&'] = false, false, false, false, false
	return t
}()

// bulkGetBody is the body of a _bulk_get request for revs, as
// json.Marshal renders {"docs": [{"id", "rev", "atts_since" (omitted when
// empty)}], "latest": true, "revs": true, "attachments": false} (members
// sorted by name).
func bulkGetBody(revs []missingRev) []byte { return bulkGetBodyAtts(revs, false) }

// bulkGetBodyAtts is bulkGetBody with "attachments" set to atts.
func bulkGetBodyAtts(revs []missingRev, atts bool) []byte {
	n := 64
	for _, m := range revs {
		n += 24 + len(m.id) + len(m.rev)
		for _, p := range m.pas {
			n += 3 + len(p)
		}
	}
	buf := make([]byte, 0, n)
	if atts {
		buf = append(buf, `{"attachments":true,"docs":[`...)
	} else {
		buf = append(buf, `{"attachments":false,"docs":[`...)
	}
	for i, m := range revs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"id":`...)
		buf = appendJSONString(buf, m.id)
		buf = append(buf, `,"rev":`...)
		buf = appendJSONString(buf, m.rev)
		if len(m.pas) > 0 {
			buf = append(buf, `,"atts_since":[`...)
			for j, p := range m.pas {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = appendJSONString(buf, p)
			}
			buf = append(buf, ']')
		}
		buf = append(buf, '}')
	}
	return append(buf, `],"latest":true,"revs":true}`...)
}
