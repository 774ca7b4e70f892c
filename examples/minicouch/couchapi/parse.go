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
	return dropInlineDigests(d), nil
}

// parseValidDoc is parseDoc for raw already checked with validJSON: the
// store does not validate it a second time.
func parseValidDoc(raw []byte) (*store.Doc, error) {
	d, err := store.ParseValidDoc(raw)
	if err != nil {
		return nil, err
	}
	return dropInlineDigests(d), nil
}

// parseValidDocInPlace is parseDoc for raw known to be valid JSON (part of
// a body validated as a whole), building the body in raw's memory
// (store.ParseValidDocInPlace): raw must not be used afterwards.
func parseValidDocInPlace(raw []byte) (*store.Doc, error) {
	d, err := store.ParseValidDocInPlace(raw)
	if err != nil {
		return nil, err
	}
	return dropInlineDigests(d), nil
}

// dropInlineDigests clears the digests sent with inline attachment data.
func dropInlineDigests(d *store.Doc) *store.Doc {
	for i, a := range d.Attachments {
		if !a.Stub && !a.Follows {
			d.Attachments[i].Digest = ""
		}
	}
	return d
}
