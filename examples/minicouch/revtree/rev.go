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
