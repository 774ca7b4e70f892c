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
type Tree struct {
	nodes map[Rev]*Node
}

// Len is the number of revisions in the tree.
func (t *Tree) Len() int { return len(t.nodes) }

// Get returns the node for rev.
func (t *Tree) Get(r Rev) (Node, bool) {
	n, ok := t.nodes[r]
	if !ok {
		return Node{}, false
	}
	return *n, true
}

// Contains reports whether rev is in the tree.
func (t *Tree) Contains(r Rev) bool { _, ok := t.nodes[r]; return ok }

// Nodes returns every node, ordered by rev.
func (t *Tree) Nodes() []Node {
	out := make([]Node, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b Node) int { return a.Rev.Compare(b.Rev) })
	return out
}

// SetBody records whether the store holds rev's body.
func (t *Tree) SetBody(r Rev, has bool) {
	if n, ok := t.nodes[r]; ok {
		n.Body = has
	}
}

// Insert adds n as given (used when decoding a stored tree). An existing node
// with the same rev is replaced.
func (t *Tree) Insert(n Node) {
	if t.nodes == nil {
		t.nodes = make(map[Rev]*Node)
	}
	c := n
	t.nodes[n.Rev] = &c
}

// Merge adds a revision path (newest first) to the tree. The newest revision
// takes deleted, body and seq; ancestors that are new to the tree are added
// as bodiless, non-deleted interior revisions. It reports whether the newest
// revision was new to the tree, or was a bodiless placeholder that now gets
// its body (CouchDB likewise prefers a stored revision over a missing one). When two paths disagree about a revision's
// parent, the smaller parent rev wins, so merging is independent of order.
func (t *Tree) Merge(p Path, deleted, body bool, seq uint64) bool {
	revs := p.Revs()
	if len(revs) == 0 || revs[len(revs)-1].Gen < 1 {
		return false
	}
	if t.nodes == nil {
		t.nodes = make(map[Rev]*Node)
	}
	added := false
	for i, r := range revs {
		var parent Rev
		if i+1 < len(revs) {
			parent = revs[i+1]
		}
		n, ok := t.nodes[r]
		if !ok {
			n = &Node{Rev: r, Parent: parent, Seq: seq}
			if i == 0 {
				n.Deleted, n.Body = deleted, body
				added = true
			}
			t.nodes[r] = n
			continue
		}
		if i == 0 && !n.Body && body {
			// A bodiless placeholder (interior or stemmed) gets its revision.
			n.Deleted, n.Body, n.Seq = deleted, true, seq
			added = true
		}
		if !parent.IsZero() && (n.Parent.IsZero() || parent.Compare(n.Parent) < 0) {
			n.Parent = parent
		}
	}
	return added
}

// children maps each rev to whether it has a child in the tree.
func (t *Tree) hasChild() map[Rev]bool {
	m := make(map[Rev]bool, len(t.nodes))
	for _, n := range t.nodes {
		if !n.Parent.IsZero() {
			if _, ok := t.nodes[n.Parent]; ok {
				m[n.Parent] = true
			}
		}
	}
	return m
}

// IsLeaf reports whether rev is in the tree and has no child.
func (t *Tree) IsLeaf(r Rev) bool {
	if !t.Contains(r) {
		return false
	}
	for _, n := range t.nodes {
		if n.Parent == r {
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
	for r, n := range t.nodes {
		if !hc[r] {
			out = append(out, *n)
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
	for r, n := range t.nodes {
		if hc[r] {
			continue
		}
		if !found || winnerCompare(*n, w) > 0 {
			w, found = *n, true
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
	n, ok := t.nodes[r]
	if !ok {
		return nil
	}
	out := []Rev{r}
	for !n.Parent.IsZero() {
		p, ok := t.nodes[n.Parent]
		if !ok || len(out) > len(t.nodes) {
			break
		}
		out = append(out, p.Rev)
		n = p
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
	for r := range t.nodes {
		if !keep[r] {
			removed = append(removed, r)
		}
	}
	for _, r := range removed {
		delete(t.nodes, r)
	}
	for _, n := range t.nodes {
		if _, ok := t.nodes[n.Parent]; !ok {
			n.Parent = Rev{}
		}
	}
	slices.SortFunc(removed, Rev.Compare)
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
		var drop []Rev
		for r, n := range t.nodes {
			if !hc[r] && !n.Body {
				drop = append(drop, r)
			}
		}
		if len(drop) == 0 {
			break
		}
		for _, r := range drop {
			delete(t.nodes, r)
		}
		removed = append(removed, drop...)
	}
	slices.SortFunc(removed, Rev.Compare)
	return removed
}
