// Package revtree implements CouchDB revision trees: merging revision paths,
// the winning-revision rule, revs_limit stemming and the queries a document
// read needs (leaves, conflicts, ancestry, latest, possible ancestors).
package revtree

import (
	"errors"
	"strconv"
	"strings"
)

// Rev is one revision id, "<Gen>-<Hash>".
type Rev struct {
	Gen  int
	Hash string
}

// MaxImportGen is the largest generation a revision may have when a client
// supplies it (new_edits=false, `_revisions`): the largest integer a
// JavaScript client such as PouchDB holds exactly, and far enough below
// the int64 limit that updates from there can never wrap.
const MaxImportGen = 1<<53 - 1

// ErrBadRev is returned by ParseRev for a string that is not "<gen>-<hash>".
var ErrBadRev = errors.New("invalid rev format")

// ParseRev parses "<gen>-<hash>"; gen must be a positive integer. The hash
// may be empty: CouchDB accepts a bare "1-" (PouchDB writes such revs with
// new_edits=false).
func ParseRev(s string) (Rev, error) {
	i := strings.IndexByte(s, '-')
	if i <= 0 {
		return Rev{}, ErrBadRev
	}
	g, err := strconv.Atoi(s[:i])
	if err != nil || g <= 0 {
		return Rev{}, ErrBadRev
	}
	return Rev{Gen: g, Hash: s[i+1:]}, nil
}

// String formats the rev as "<gen>-<hash>".
func (r Rev) String() string { return strconv.Itoa(r.Gen) + "-" + r.Hash }

// AppendText appends the rev as String formats it, without making the string.
func (r Rev) AppendText(dst []byte) []byte {
	dst = strconv.AppendInt(dst, int64(r.Gen), 10)
	dst = append(dst, '-')
	return append(dst, r.Hash...)
}

// TextLen is the length of the rev as String formats it.
func (r Rev) TextLen() int {
	n := 2 + len(r.Hash) // a digit and "-"
	if r.Gen < 0 {
		n++
	}
	for g := r.Gen / 10; g != 0; g /= 10 {
		n++
	}
	return n
}

// Spells reports whether s is the rev as String formats it (so a string a
// caller already has can stand for the rev without formatting another).
func (r Rev) Spells(s string) bool {
	var a [24]byte
	p := append(strconv.AppendInt(a[:0], int64(r.Gen), 10), '-')
	return len(s) == len(p)+len(r.Hash) && s[:len(p)] == string(p) && s[len(p):] == r.Hash
}

// IsZero reports whether r is the zero Rev (no revision).
func (r Rev) IsZero() bool { return r.Gen == 0 && r.Hash == "" }

// Compare orders revs by generation, then hash (byte order): -1, 0 or 1.
func (r Rev) Compare(o Rev) int {
	switch {
	case r.Gen < o.Gen:
		return -1
	case r.Gen > o.Gen:
		return 1
	}
	return strings.Compare(r.Hash, o.Hash)
}
