package revtree

import (
	"encoding/binary"
	"errors"
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
	nodes := t.Nodes()
	idx := make(map[Rev]int, len(nodes))
	for i, n := range nodes {
		idx[n.Rev] = i + 1
	}
	dst = binary.AppendUvarint(dst, uint64(len(nodes)))
	for _, n := range nodes {
		dst = binary.AppendUvarint(dst, uint64(n.Rev.Gen))
		dst = binary.AppendUvarint(dst, uint64(len(n.Rev.Hash)))
		dst = append(dst, n.Rev.Hash...)
		dst = binary.AppendUvarint(dst, uint64(idx[n.Parent]))
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
	nodes := make([]Node, count)
	parents := make([]uint64, count)
	for i := range nodes {
		gen, ok1 := uv()
		hl, ok2 := uv()
		if !ok1 || !ok2 || gen == 0 || hl > uint64(len(b)-pos) {
			return Tree{}, 0, ErrCorrupt
		}
		nodes[i].Rev = Rev{Gen: int(gen), Hash: string(b[pos : pos+int(hl)])}
		pos += int(hl)
		p, ok3 := uv()
		if !ok3 || p > count || pos >= len(b) {
			return Tree{}, 0, ErrCorrupt
		}
		parents[i] = p
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
	t := Tree{nodes: make(map[Rev]*Node, count)}
	for i := range nodes {
		if parents[i] > 0 {
			nodes[i].Parent = nodes[parents[i]-1].Rev
		}
		t.nodes[nodes[i].Rev] = &nodes[i]
	}
	return t, pos, nil
}
