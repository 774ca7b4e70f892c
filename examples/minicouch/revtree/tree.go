package revtree

import (
	"slices"
)

// Node is one revision in a tree.
type Node struct {
	Rev Rev
	// Parent is the parent's rev; the zero Rev when the node is a root (the
	// first revision, or the oldest one kept after stemming).
	Parent Rev
	// Deleted marks a revision that is a deletion (tombstone).
	Deleted bool
	// Body reports that the store holds this revision's body.
	Body bool
	// Seq is the update sequence at which this revision was added.
	Seq uint64
}

// Path is a revision and its ancestors as CouchDB's _revisions gives them:
// IDs[0] is the revision at generation Start, IDs[i] is at Start-i.
type Path struct {
	Start int
	IDs   []string
}

// Revs expands the path into revs, newest first.
func (p Path) Revs() []Rev {
	out := make([]Rev, len(p.IDs))
	for i, id := range p.IDs {
		out[i] = Rev{Gen: p.Start - i, Hash: id}
	}
	return out
}

// Tree is a document's revision tree. The zero Tree is empty and ready to use.
// A Tree is not safe for concurrent mutation.
//
// The nodes are kept in a slice ordered by rev (Rev.Compare): almost every
// tree has a handful of revisions, and a sorted slice finds one with a binary
// search without the allocations of a map and its per-node pointers, which
// decoding, merging and choosing the winner paid on every document write and
// read.
type Tree struct {
	nodes []Node
}

// find returns the index of r in t.nodes and whether it is there (else the
// index where it would be inserted).
func (t *Tree) find(r Rev) (int, bool) {
	return slices.BinarySearchFunc(t.nodes, r, func(n Node, r Rev) int { return n.Rev.Compare(r) })
}

// Len is the number of revisions in the tree.
func (t *Tree) Len() int { return len(t.nodes) }

// Get returns the node for rev.
func (t *Tree) Get(r Rev) (Node, bool) {
	i, ok := t.find(r)
	if !ok {
		return Node{}, false
	}
	return t.nodes[i], true
}

// Contains reports whether rev is in the tree.
func (t *Tree) Contains(r Rev) bool { _, ok := t.find(r); return ok }

// Nodes returns every node, ordered by rev.
func (t *Tree) Nodes() []Node {
	return slices.Clone(t.nodes)
}

// SetBody records whether the store holds rev's body.
func (t *Tree) SetBody(r Rev, has bool) {
	if i, ok := t.find(r); ok {
		t.nodes[i].Body = has
	}
}

// Insert adds n as given (used when decoding a stored tree). An existing node
// with the same rev is replaced.
func (t *Tree) Insert(n Node) {
	i, ok := t.find(n.Rev)
	if ok {
		t.nodes[i] = n
		return
	}
	t.nodes = slices.Insert(t.nodes, i, n)
}

// Merge adds a revision path (newest first) to the tree. The newest revision
// takes deleted, body and seq; ancestors that are new to the tree are added
// as bodiless, non-deleted interior revisions. It reports whether the newest
// revision was new to the tree, or was a bodiless placeholder that now gets
// its body (CouchDB likewise prefers a stored revision over a missing one). When two paths disagree about a revision's
// parent, the smaller parent rev wins, so merging is independent of order.
func (t *Tree) Merge(p Path, deleted, body bool, seq uint64) bool {
	n := len(p.IDs)
	if n == 0 || p.Start-(n-1) < 1 {
		return false
	}
	// The revs of a path are distinct (each has its own generation), so
	// new nodes are appended and the slice sorted once at the end; lookups
	// only ever need the nodes that were there before.
	old := len(t.nodes)
	if cap(t.nodes) == 0 {
		t.nodes = make([]Node, 0, n)
	}
	added := false
	for i, id := range p.IDs {
		r := Rev{Gen: p.Start - i, Hash: id}
		var parent Rev
		if i+1 < n {
			parent = Rev{Gen: p.Start - i - 1, Hash: p.IDs[i+1]}
		}
		j, ok := slices.BinarySearchFunc(t.nodes[:old], r, func(n Node, r Rev) int { return n.Rev.Compare(r) })
		if !ok {
			nn := Node{Rev: r, Parent: parent, Seq: seq}
			if i == 0 {
				nn.Deleted, nn.Body = deleted, body
				added = true
			}
			t.nodes = append(t.nodes, nn)
			continue
		}
		e := &t.nodes[j]
		if i == 0 && !e.Body && body {
			// A bodiless placeholder (interior or stemmed) gets its revision.
			e.Deleted, e.Body, e.Seq = deleted, true, seq
			added = true
		}
		if !parent.IsZero() && (e.Parent.IsZero() || parent.Compare(e.Parent) < 0) {
			e.Parent = parent
		}
	}
	if len(t.nodes) > old {
		t.sort()
	}
	return added
}

// sort orders the nodes by rev.
func (t *Tree) sort() {
	slices.SortFunc(t.nodes, func(a, b Node) int { return a.Rev.Compare(b.Rev) })
}

// childMarks records, per node index, whether the node has a child in the
// tree; trees of up to 64 nodes need no allocation.
type childMarks struct {
	small uint64
	big   []bool
}

func (m *childMarks) set(i int) {
	if m.big != nil {
		m.big[i] = true
	} else {
		m.small |= 1 << uint(i)
	}
}

func (m *childMarks) has(i int) bool {
	if m.big != nil {
		return m.big[i]
	}
	return m.small&(1<<uint(i)) != 0
}

// hasChild marks each node that has a child in the tree.
func (t *Tree) hasChild() childMarks {
	var m childMarks
	if len(t.nodes) > 64 {
		m.big = make([]bool, len(t.nodes))
	}
	for i := range t.nodes {
		par := t.nodes[i].Parent
		if par.IsZero() {
			continue
		}
		if j, ok := t.find(par); ok {
			m.set(j)
		}
	}
	return m
}

// IsLeaf reports whether rev is in the tree and has no child.
func (t *Tree) IsLeaf(r Rev) bool {
	if !t.Contains(r) {
		return false
	}
	for i := range t.nodes {
		if t.nodes[i].Parent == r {
			return false
		}
	}
	return true
}

// winnerCompare orders leaves by CouchDB's rule: non-deleted beat deleted,
// then higher generation, then higher hash. It returns >0 when a wins.
func winnerCompare(a, b Node) int {
	if a.Deleted != b.Deleted {
		if !a.Deleted {
			return 1
		}
		return -1
	}
	return a.Rev.Compare(b.Rev)
}

// Leaves returns the leaf revisions, the winner first, then the rest in
// descending winning order (CouchDB's doc_info order).
func (t *Tree) Leaves() []Node {
	hc := t.hasChild()
	var out []Node
	for i := range t.nodes {
		if !hc.has(i) {
			out = append(out, t.nodes[i])
		}
	}
	slices.SortFunc(out, func(a, b Node) int { return winnerCompare(b, a) })
	return out
}

// Winner returns the winning leaf; ok is false for an empty tree.
func (t *Tree) Winner() (Node, bool) {
	hc := t.hasChild()
	var w Node
	found := false
	for i := range t.nodes {
		if hc.has(i) {
			continue
		}
		if !found || winnerCompare(t.nodes[i], w) > 0 {
			w, found = t.nodes[i], true
		}
	}
	return w, found
}

// Conflicts returns the non-deleted leaves other than the winner, in
// descending winning order (CouchDB's _conflicts).
func (t *Tree) Conflicts() []Rev {
	var out []Rev
	for i, l := range t.Leaves() {
		if i > 0 && !l.Deleted {
			out = append(out, l.Rev)
		}
	}
	return out
}

// DeletedConflicts returns the deleted leaves other than the winner, in
// descending winning order (CouchDB's _deleted_conflicts).
func (t *Tree) DeletedConflicts() []Rev {
	var out []Rev
	for i, l := range t.Leaves() {
		if i > 0 && l.Deleted {
			out = append(out, l.Rev)
		}
	}
	return out
}

// Ancestry returns rev followed by its known ancestors, newest first; nil if
// rev is not in the tree.
func (t *Tree) Ancestry(r Rev) []Rev {
	i, ok := t.find(r)
	if !ok {
		return nil
	}
	out := []Rev{r}
	for !t.nodes[i].Parent.IsZero() {
		j, ok := t.find(t.nodes[i].Parent)
		if !ok || len(out) > len(t.nodes) {
			break
		}
		out = append(out, t.nodes[j].Rev)
		i = j
	}
	return out
}

// PathTo returns rev's ancestry as a _revisions path.
func (t *Tree) PathTo(r Rev) Path {
	anc := t.Ancestry(r)
	p := Path{Start: r.Gen, IDs: make([]string, len(anc))}
	for i, a := range anc {
		p.IDs[i] = a.Hash
	}
	return p
}

// Latest returns the leaves that descend from rev (rev itself when it is a
// leaf), in descending winning order; nil if rev is not in the tree.
func (t *Tree) Latest(r Rev) []Rev {
	if !t.Contains(r) {
		return nil
	}
	var out []Rev
	for _, l := range t.Leaves() {
		for _, a := range t.Ancestry(l.Rev) {
			if a == r {
				out = append(out, l.Rev)
				break
			}
		}
	}
	return out
}

// Missing returns those of revs that are not in the tree, sorted ascending
// and without duplicates.
func (t *Tree) Missing(revs []Rev) []Rev {
	var out []Rev
	for _, r := range revs {
		if !t.Contains(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, Rev.Compare)
	return slices.Compact(out)
}

// PossibleAncestors returns the leaves whose generation is lower than that of
// any of missing, in descending winning order (CouchDB's _revs_diff
// possible_ancestors).
func (t *Tree) PossibleAncestors(missing []Rev) []Rev {
	maxGen := 0
	for _, m := range missing {
		maxGen = max(maxGen, m.Gen)
	}
	var out []Rev
	for _, l := range t.Leaves() {
		if l.Rev.Gen < maxGen {
			out = append(out, l.Rev)
		}
	}
	return out
}

// Stem keeps at most limit revisions on each path from a leaf towards the
// root and removes the rest; the oldest kept revisions become roots. It
// returns the removed revs, ascending.
func (t *Tree) Stem(limit int) []Rev {
	if limit <= 0 || len(t.nodes) <= limit {
		return nil
	}
	keep := make(map[Rev]bool, len(t.nodes))
	for _, l := range t.Leaves() {
		anc := t.Ancestry(l.Rev)
		for _, a := range anc[:min(limit, len(anc))] {
			keep[a] = true
		}
	}
	var removed []Rev
	kept := t.nodes[:0]
	for _, n := range t.nodes {
		if keep[n.Rev] {
			kept = append(kept, n)
		} else {
			removed = append(removed, n.Rev)
		}
	}
	clear(t.nodes[len(kept):])
	t.nodes = kept
	for i := range t.nodes {
		if !t.Contains(t.nodes[i].Parent) {
			t.nodes[i].Parent = Rev{}
		}
	}
	return removed
}

// PruneBodiless removes leaves whose body is not stored, repeatedly (their
// parents may become such leaves), and returns the removed revs ascending.
// In consistent histories every leaf has a body; a bodiless leaf appears
// only when paths disagree about a revision's parent, and carries nothing
// a reader could be given.
func (t *Tree) PruneBodiless() []Rev {
	var removed []Rev
	for {
		hc := t.hasChild()
		kept := t.nodes[:0]
		n := len(removed)
		for i, nd := range t.nodes {
			if !hc.has(i) && !nd.Body {
				removed = append(removed, nd.Rev)
			} else {
				kept = append(kept, nd)
			}
		}
		if len(removed) == n {
			break
		}
		clear(t.nodes[len(kept):])
		t.nodes = kept
	}
	slices.SortFunc(removed, Rev.Compare)
	return removed
}
