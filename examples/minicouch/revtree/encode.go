package revtree

import (
	"encoding/binary"
	"errors"
	"slices"
)

// ErrCorrupt is returned by Decode for bytes that are not an encoded tree.
var ErrCorrupt = errors.New("revtree: corrupt encoding")

const (
	flagDeleted = 1 << iota
	flagBody
)

// AppendEncode appends a compact binary encoding of the tree to dst: node
// count, then per node (ordered by rev) generation, hash, parent index (0 =
// root), flags and seq, all as uvarints or length-prefixed bytes.
func (t *Tree) AppendEncode(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(t.nodes)))
	for _, n := range t.nodes {
		dst = binary.AppendUvarint(dst, uint64(n.Rev.Gen))
		dst = binary.AppendUvarint(dst, uint64(len(n.Rev.Hash)))
		dst = append(dst, n.Rev.Hash...)
		var p uint64
		if !n.Parent.IsZero() {
			if j, ok := t.find(n.Parent); ok {
				p = uint64(j + 1)
			}
		}
		dst = binary.AppendUvarint(dst, p)
		var f byte
		if n.Deleted {
			f |= flagDeleted
		}
		if n.Body {
			f |= flagBody
		}
		dst = append(dst, f)
		dst = binary.AppendUvarint(dst, n.Seq)
	}
	return dst
}

// MaxEncodedLen bounds the length of the tree's AppendEncode encoding,
// so a caller can give it a buffer it will not outgrow.
func (t *Tree) MaxEncodedLen() int {
	n := binary.MaxVarintLen64
	for i := range t.nodes {
		// gen, hash length, parent index, seq (uvarints), flags, hash
		n += 4*binary.MaxVarintLen64 + 1 + len(t.nodes[i].Rev.Hash)
	}
	return n
}

// Decode parses an encoding made by AppendEncode and returns the tree and
// the number of bytes consumed.
func Decode(b []byte) (Tree, int, error) {
	pos := 0
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(b[pos:])
		if n <= 0 {
			return 0, false
		}
		pos += n
		return v, true
	}
	count, ok := uv()
	if !ok || count > uint64(len(b)) {
		return Tree{}, 0, ErrCorrupt
	}
	// One string holds every hash (each node's Hash is a substring of it)
	// and parent indexes of small trees stay on the stack.
	str := string(b)
	nodes := make([]Node, count)
	var small [8]uint64
	parents := small[:0]
	if count > uint64(len(small)) {
		parents = make([]uint64, 0, count)
	}
	for i := range nodes {
		gen, ok1 := uv()
		hl, ok2 := uv()
		if !ok1 || !ok2 || gen == 0 || hl > uint64(len(b)-pos) {
			return Tree{}, 0, ErrCorrupt
		}
		nodes[i].Rev = Rev{Gen: int(gen), Hash: str[pos : pos+int(hl)]}
		pos += int(hl)
		p, ok3 := uv()
		if !ok3 || p > count || pos >= len(b) {
			return Tree{}, 0, ErrCorrupt
		}
		parents = append(parents, p)
		f := b[pos]
		pos++
		nodes[i].Deleted = f&flagDeleted != 0
		nodes[i].Body = f&flagBody != 0
		seq, ok4 := uv()
		if !ok4 {
			return Tree{}, 0, ErrCorrupt
		}
		nodes[i].Seq = seq
	}
	for i := range nodes {
		if parents[i] > 0 {
			nodes[i].Parent = nodes[parents[i]-1].Rev
		}
	}
	t := Tree{nodes: nodes}
	if !slices.IsSortedFunc(nodes, func(a, b Node) int { return a.Rev.Compare(b.Rev) }) {
		// Not written by AppendEncode: order it, the last of equal revs winning.
		slices.Reverse(nodes)
		slices.SortStableFunc(nodes, func(a, b Node) int { return a.Rev.Compare(b.Rev) })
		t.nodes = slices.CompactFunc(nodes, func(a, b Node) bool { return a.Rev == b.Rev })
	} else if len(nodes) > 1 {
		t.nodes = dedupLast(nodes)
	}
	return t, pos, nil
}

// dedupLast drops all but the last of adjacent nodes with equal revs.
func dedupLast(nodes []Node) []Node {
	out := nodes[:0]
	for i, n := range nodes {
		if i+1 < len(nodes) && nodes[i+1].Rev == n.Rev {
			continue
		}
		out = append(out, n)
	}
	return out
}
