package couchapi

import "github.com/couchepi/couchepi/examples/minicouch/store"

// parseDoc is store.ParseDoc (CouchDB's rules for special members) with
// the digest of inline attachment data dropped: CouchDB computes that
// digest itself and ignores one sent along (clients often keep a stale
// one).
func parseDoc(raw []byte) (*store.Doc, error) {
	d, err := store.ParseDoc(raw)
	if err != nil {
		return nil, err
	}
	for i, a := range d.Attachments {
		if !a.Stub && !a.Follows {
			d.Attachments[i].Digest = ""
		}
	}
	return d, nil
}
