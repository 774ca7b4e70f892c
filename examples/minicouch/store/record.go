package store

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/couchepi/couchepi/examples/minicouch/revtree"
)

// errCorrupt reports stored bytes that do not decode.
var errCorrupt = errors.New("store: corrupt record")

const recDeleted = 1 // docRecord flag: the winning revision is a deletion

// docRecord is the value of a document in the docs bucket: a flags byte,
// the document's update seq, its winning rev, then the revision tree. The
// header lets _all_docs read the winner without decoding the tree.
type docRecord struct {
	seq  uint64
	tree revtree.Tree
}

func (r *docRecord) encode() []byte { return r.encodeIn(nil) }

// encodeIn is encode into memory from a (nil: allocated).
func (r *docRecord) encodeIn(a *valueArena) []byte {
	w, _ := r.tree.Winner()
	var f byte
	if w.Deleted {
		f |= recDeleted
	}
	wl := w.Rev.TextLen()
	buf := a.alloc(1 + 2*binary.MaxVarintLen64 + wl + r.tree.MaxEncodedLen())
	buf = append(buf, f)
	buf = binary.AppendUvarint(buf, r.seq)
	buf = binary.AppendUvarint(buf, uint64(wl))
	buf = w.Rev.AppendText(buf)
	return r.tree.AppendEncode(buf)
}

// recordHeader decodes the flags, seq and winning rev of an encoded record
// and returns the offset of the tree.
func recordHeader(v []byte) (deleted bool, seq uint64, winner string, off int, err error) {
	if len(v) < 1 {
		return false, 0, "", 0, errCorrupt
	}
	deleted = v[0]&recDeleted != 0
	off = 1
	seq, n := binary.Uvarint(v[off:])
	if n <= 0 {
		return false, 0, "", 0, errCorrupt
	}
	off += n
	winner, off, err = readBytes(v, off)
	return deleted, seq, winner, off, err
}

func decodeRecord(v []byte) (*docRecord, error) {
	_, seq, _, off, err := recordHeader(v)
	if err != nil {
		return nil, err
	}
	t, _, err := revtree.Decode(v[off:])
	if err != nil {
		return nil, err
	}
	return &docRecord{seq: seq, tree: t}, nil
}

func appendBytes(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

func readBytes(v []byte, off int) (string, int, error) {
	l, n := binary.Uvarint(v[off:])
	if n <= 0 || l > uint64(len(v)-off-n) {
		return "", 0, errCorrupt
	}
	off += n
	return string(v[off : off+int(l)]), off + int(l), nil
}

func readUvarint(v []byte, off int) (uint64, int, error) {
	x, n := binary.Uvarint(v[off:])
	if n <= 0 {
		return 0, 0, errCorrupt
	}
	return x, off + n, nil
}

// storedAtt is an attachment as recorded in a revision body.
type storedAtt struct {
	Name, ContentType, Digest, Encoding string
	Length, EncodedLength               int64
	RevPos                              int
}

func (a storedAtt) info() AttachmentInfo {
	return AttachmentInfo{Name: a.Name, ContentType: a.ContentType, Digest: a.Digest, Length: a.Length,
		RevPos: a.RevPos, Encoding: a.Encoding, EncodedLength: a.EncodedLength, Stub: true}
}

// revBody is a stored revision: JSON body and attachments (in CouchDB's
// order: as written, a standalone PUT's first).
type revBody struct {
	body []byte
	atts []storedAtt
}

// encodeIn encodes the revision into memory from a (nil: allocated).
func (rb *revBody) encodeIn(a *valueArena) []byte {
	n := 2*binary.MaxVarintLen64 + len(rb.body)
	for _, at := range rb.atts {
		n += 7*binary.MaxVarintLen64 + len(at.Name) + len(at.ContentType) + len(at.Digest) + len(at.Encoding)
	}
	buf := a.alloc(n)
	buf = binary.AppendUvarint(buf, uint64(len(rb.body)))
	buf = append(buf, rb.body...)
	buf = binary.AppendUvarint(buf, uint64(len(rb.atts)))
	for _, a := range rb.atts {
		buf = appendBytes(buf, a.Name)
		buf = appendBytes(buf, a.ContentType)
		buf = appendBytes(buf, a.Digest)
		buf = appendBytes(buf, a.Encoding)
		buf = binary.AppendUvarint(buf, uint64(a.Length))
		buf = binary.AppendUvarint(buf, uint64(a.EncodedLength))
		buf = binary.AppendUvarint(buf, uint64(a.RevPos))
	}
	return buf
}

func decodeRevBody(v []byte) (*revBody, error) {
	bl, off, err := readUvarint(v, 0)
	if err != nil || bl > uint64(len(v)-off) {
		return nil, errCorrupt
	}
	rb := &revBody{body: append([]byte(nil), v[off:off+int(bl)]...)}
	off += int(bl)
	na, off, err := readUvarint(v, off)
	if err != nil || na > uint64(len(v)) {
		return nil, errCorrupt
	}
	rb.atts = make([]storedAtt, na)
	for i := range rb.atts {
		a := &rb.atts[i]
		var l, el, rp uint64
		if a.Name, off, err = readBytes(v, off); err != nil {
			return nil, err
		}
		if a.ContentType, off, err = readBytes(v, off); err != nil {
			return nil, err
		}
		if a.Digest, off, err = readBytes(v, off); err != nil {
			return nil, err
		}
		if a.Encoding, off, err = readBytes(v, off); err != nil {
			return nil, err
		}
		if l, off, err = readUvarint(v, off); err != nil {
			return nil, err
		}
		if el, off, err = readUvarint(v, off); err != nil {
			return nil, err
		}
		if rp, off, err = readUvarint(v, off); err != nil {
			return nil, err
		}
		a.Length, a.EncodedLength, a.RevPos = int64(l), int64(el), int(rp)
	}
	return rb, nil
}

func (rb *revBody) att(name string) (storedAtt, bool) {
	for _, a := range rb.atts {
		if a.Name == name {
			return a, true
		}
	}
	return storedAtt{}, false
}

func sortAtts(atts []storedAtt) {
	slices.SortFunc(atts, func(a, b storedAtt) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
}

// revKey is the key of a revision body: uvarint(len(id)) id rev, so that
// no (id, rev) pair can collide with another.
func revKey(id, rev string) []byte {
	k := make([]byte, 0, len(id)+len(rev)+2)
	k = binary.AppendUvarint(k, uint64(len(id)))
	k = append(k, id...)
	return append(k, rev...)
}

// revKeyIn is revKey for a parsed rev, in memory from a.
func revKeyIn(a *valueArena, id string, rev revtree.Rev) []byte {
	k := a.alloc(binary.MaxVarintLen64 + len(id) + rev.TextLen())
	k = binary.AppendUvarint(k, uint64(len(id)))
	k = append(k, id...)
	return rev.AppendText(k)
}
