package revtree

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func path(start int, ids ...string) Path { return Path{Start: start, IDs: ids} }

func revs(ss ...string) []Rev {
	out := make([]Rev, len(ss))
	for i, s := range ss {
		r, err := ParseRev(s)
		if err != nil {
			panic(err)
		}
		out[i] = r
	}
	return out
}

func TestParseRev(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rev
		ok   bool
	}{
		{"1-abc", Rev{1, "abc"}, true},
		{"12-x-y", Rev{12, "x-y"}, true},
		{"0-abc", Rev{}, false},
		{"-abc", Rev{}, false},
		{"1-", Rev{1, ""}, true},
		{"abc", Rev{}, false},
		{"x-abc", Rev{}, false},
		{"", Rev{}, false},
	} {
		got, err := ParseRev(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseRev(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}

type leaf struct {
	p       Path
	deleted bool
}

func build(leaves ...leaf) *Tree {
	var t Tree
	for _, l := range leaves {
		t.Merge(l.p, l.deleted, true, 0)
	}
	return &t
}

func TestWinner(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leaves []leaf
		want   string
		confl  []string
		delc   []string
	}{
		{"single", []leaf{{path(1, "a"), false}}, "1-a", nil, nil},
		{"higher gen wins", []leaf{{path(2, "a", "r"), false}, {path(3, "b", "x", "r"), false}}, "3-b", []string{"2-a"}, nil},
		{"same gen higher hash", []leaf{{path(2, "aaa", "r"), false}, {path(2, "bbb", "r"), false}}, "2-bbb", []string{"2-aaa"}, nil},
		{"non-deleted beats deleted higher gen", []leaf{{path(2, "a", "r"), false}, {path(5, "z", "y", "x", "w", "r"), true}}, "2-a", nil, []string{"5-z"}},
		{"all deleted: highest", []leaf{{path(2, "a", "r"), true}, {path(3, "b", "q", "r"), true}}, "3-b", nil, []string{"2-a"}},
		{"hash compare is bytewise", []leaf{{path(1, "B"), false}, {path(1, "a"), false}}, "1-a", []string{"1-B"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := build(tc.leaves...)
			w, ok := tr.Winner()
			if !ok || w.Rev.String() != tc.want {
				t.Fatalf("winner = %v, want %s", w.Rev, tc.want)
			}
			if l := tr.Leaves(); l[0].Rev != w.Rev {
				t.Errorf("Leaves()[0] = %v, want winner %v", l[0].Rev, w.Rev)
			}
			if got := strs(tr.Conflicts()); !slices.Equal(got, tc.confl) {
				t.Errorf("conflicts = %v, want %v", got, tc.confl)
			}
			if got := strs(tr.DeletedConflicts()); !slices.Equal(got, tc.delc) {
				t.Errorf("deleted conflicts = %v, want %v", got, tc.delc)
			}
		})
	}
}

func strs(rs []Rev) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func TestStem(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaves  []leaf
		limit   int
		removed []string
		roots   []string
	}{
		{"under limit", []leaf{{path(3, "c", "b", "a"), false}}, 5, nil, []string{"1-a"}},
		{"linear", []leaf{{path(5, "e", "d", "c", "b", "a"), false}}, 2, []string{"1-a", "2-b", "3-c"}, []string{"4-d"}},
		{"branch keeps shared ancestors", []leaf{{path(4, "d", "c", "b", "a"), false}, {path(2, "x", "a"), false}}, 2,
			[]string{"2-b"}, []string{"1-a", "3-c"}},
		{"limit 1 keeps only leaves", []leaf{{path(3, "c", "b", "a"), false}, {path(3, "z", "b", "a"), false}}, 1,
			[]string{"1-a", "2-b"}, []string{"3-c", "3-z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := build(tc.leaves...)
			leavesBefore := strs(nodeRevs(tr.Leaves()))
			got := strs(tr.Stem(tc.limit))
			if !slices.Equal(got, tc.removed) {
				t.Errorf("removed = %v, want %v", got, tc.removed)
			}
			var roots []string
			for _, n := range tr.Nodes() {
				if n.Parent.IsZero() {
					roots = append(roots, n.Rev.String())
				}
			}
			if !slices.Equal(roots, tc.roots) {
				t.Errorf("roots = %v, want %v", roots, tc.roots)
			}
			if after := strs(nodeRevs(tr.Leaves())); !slices.Equal(after, leavesBefore) {
				t.Errorf("leaves changed: %v -> %v", leavesBefore, after)
			}
		})
	}
}

func nodeRevs(ns []Node) []Rev {
	out := make([]Rev, len(ns))
	for i, n := range ns {
		out[i] = n.Rev
	}
	return out
}

func TestQueries(t *testing.T) {
	tr := build(leaf{path(3, "c", "b", "a"), false}, leaf{path(3, "z", "b", "a"), true}, leaf{path(2, "y", "a"), false})
	if got := strs(tr.Latest(revs("2-b")[0])); !slices.Equal(got, []string{"3-c", "3-z"}) {
		t.Errorf("Latest(2-b) = %v", got)
	}
	if got := strs(tr.Latest(revs("3-c")[0])); !slices.Equal(got, []string{"3-c"}) {
		t.Errorf("Latest(3-c) = %v", got)
	}
	if tr.Latest(revs("9-q")[0]) != nil {
		t.Errorf("Latest of unknown rev should be nil")
	}
	p := tr.PathTo(revs("3-c")[0])
	if p.Start != 3 || !slices.Equal(p.IDs, []string{"c", "b", "a"}) {
		t.Errorf("PathTo = %+v", p)
	}
	missing := tr.Missing(revs("4-new", "2-b", "1-q", "4-new"))
	if got := strs(missing); !slices.Equal(got, []string{"1-q", "4-new"}) {
		t.Errorf("Missing = %v", got)
	}
	if got := strs(tr.PossibleAncestors(revs("3-q"))); !slices.Equal(got, []string{"2-y"}) {
		t.Errorf("PossibleAncestors(3-q) = %v", got)
	}
	if got := strs(tr.PossibleAncestors(revs("4-q"))); !slices.Equal(got, []string{"3-c", "2-y", "3-z"}) {
		t.Errorf("PossibleAncestors(4-q) = %v", got)
	}
	if !tr.IsLeaf(revs("2-y")[0]) || tr.IsLeaf(revs("2-b")[0]) {
		t.Errorf("IsLeaf wrong")
	}
}

func TestMergePlaceholderGetsBody(t *testing.T) {
	var tr Tree
	tr.Merge(path(3, "c", "b", "a"), false, true, 1)
	if n, _ := tr.Get(revs("2-b")[0]); n.Body {
		t.Fatalf("interior node should have no body")
	}
	if !tr.Merge(path(2, "b", "a"), true, true, 2) {
		t.Fatalf("merging a body into a placeholder should report added")
	}
	if n, _ := tr.Get(revs("2-b")[0]); !n.Body || !n.Deleted {
		t.Fatalf("placeholder not upgraded: %+v", n)
	}
	if tr.Merge(path(3, "c", "b", "a"), false, true, 3) {
		t.Fatalf("re-merging a stored leaf should not report added")
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	tr := build(leaf{path(3, "c", "b", "a"), false}, leaf{path(3, "z", "b", "a"), true})
	tr.Stem(2)
	enc := tr.AppendEncode([]byte("x"))
	got, n, err := Decode(enc[1:])
	if err != nil || n != len(enc)-1 {
		t.Fatalf("Decode: %v, n=%d", err, n)
	}
	if !slices.Equal(got.Nodes(), tr.Nodes()) {
		t.Fatalf("round trip: %v != %v", got.Nodes(), tr.Nodes())
	}
	for i := range enc[1:] {
		if _, _, err := Decode(enc[1 : 1+i]); err == nil && i < len(enc)-1 {
			// a truncated prefix may decode only if it is a full encoding
			t.Errorf("truncated encoding of %d bytes decoded", i)
		}
	}
}

// randomTree makes a random consistent tree as a list of root-to-leaf paths
// (leaf first) with deleted flags.
func randomTree(r *rand.Rand) []leaf {
	type n struct {
		rev    Rev
		parent int
	}
	nodes := []n{{Rev{1, "r0"}, -1}}
	count := 1 + r.IntN(20)
	for i := 1; i < count; i++ {
		p := r.IntN(len(nodes))
		if r.IntN(4) == 0 {
			nodes = append(nodes, n{Rev{1, fmt.Sprintf("r%d", i)}, -1})
			continue
		}
		nodes = append(nodes, n{Rev{nodes[p].rev.Gen + 1, fmt.Sprintf("h%d", r.IntN(6))}, p})
	}
	hasChild := map[int]bool{}
	for _, x := range nodes {
		if x.parent >= 0 {
			hasChild[x.parent] = true
		}
	}
	seen := map[Rev]bool{}
	var out []leaf
	for i := range nodes {
		if hasChild[i] || seen[nodes[i].rev] {
			continue
		}
		seen[nodes[i].rev] = true
		p := Path{Start: nodes[i].rev.Gen}
		for j := i; j >= 0; j = nodes[j].parent {
			p.IDs = append(p.IDs, nodes[j].rev.Hash)
		}
		// sometimes send only a suffix of the history, as a stemmed source would
		if len(p.IDs) > 1 && r.IntN(3) == 0 {
			p.IDs = p.IDs[:1+r.IntN(len(p.IDs))]
		}
		out = append(out, leaf{p, r.IntN(3) == 0})
	}
	return out
}

func checkOrderIndependent(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	leaves := randomTree(r)
	ref := build(leaves...)
	w0, _ := ref.Winner()
	for range 4 {
		shuffled := slices.Clone(leaves)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		// merge some paths twice
		if len(shuffled) > 0 {
			shuffled = append(shuffled, shuffled[r.IntN(len(shuffled))])
		}
		got := build(shuffled...)
		if !slices.Equal(got.Nodes(), ref.Nodes()) {
			t.Fatalf("seed %d: tree depends on merge order:\n%v\n%v", seed, ref.Nodes(), got.Nodes())
		}
		if w, _ := got.Winner(); w != w0 {
			t.Fatalf("seed %d: winner %v != %v", seed, w.Rev, w0.Rev)
		}
	}
	enc := ref.AppendEncode(nil)
	dec, _, err := Decode(enc)
	if err != nil || !slices.Equal(dec.Nodes(), ref.Nodes()) {
		t.Fatalf("seed %d: encode round trip failed: %v", seed, err)
	}
	ref.Stem(1 + r.IntN(4))
	for _, l := range ref.Leaves() {
		_ = ref.Ancestry(l.Rev)
	}
}

func TestMergeOrderIndependent(t *testing.T) {
	for seed := range uint64(500) {
		checkOrderIndependent(t, seed)
	}
}

// FuzzRevTreeMerge checks that random revision paths merged in random
// orders give the same tree and winner, and that nothing panics.
func FuzzRevTreeMerge(f *testing.F) {
	for _, s := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		checkOrderIndependent(t, seed)
	})
}

// FuzzDecode feeds arbitrary bytes to Decode: no panic.
func FuzzDecode(f *testing.F) {
	f.Add(build(leaf{path(2, "b", "a"), false}).AppendEncode(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, _, err := Decode(b)
		if err == nil {
			tr.Leaves()
			tr.Stem(2)
		}
	})
}

func TestPruneBodiless(t *testing.T) {
	var tr Tree
	tr.Merge(path(3, "c", "b", "a"), false, true, 0)
	// a second path gives 3-c a smaller parent: 2-b loses its child
	tr.Merge(path(3, "c", "a2", "a"), false, true, 0)
	if got := strs(nodeRevs(tr.Leaves())); !slices.Equal(got, []string{"3-c", "2-b"}) {
		t.Fatalf("leaves before prune: %v", got)
	}
	if got := strs(tr.PruneBodiless()); !slices.Equal(got, []string{"2-b"}) {
		t.Fatalf("pruned %v", got)
	}
	if got := strs(nodeRevs(tr.Leaves())); !slices.Equal(got, []string{"3-c"}) {
		t.Fatalf("leaves after prune: %v", got)
	}
}

// TestDecodeUnordered checks that encodings whose nodes are not in rev order
// or repeat a rev decode to a tree in rev order, the last of repeated revs
// winning, with parents named by index resolved before reordering.
func TestDecodeUnordered(t *testing.T) {
	type enc struct {
		gen    int
		hash   string
		parent int // index+1 in the encoding, 0 = root
		seq    uint64
	}
	encode := func(ns []enc) []byte {
		b := binary.AppendUvarint(nil, uint64(len(ns)))
		for _, n := range ns {
			b = binary.AppendUvarint(b, uint64(n.gen))
			b = binary.AppendUvarint(b, uint64(len(n.hash)))
			b = append(b, n.hash...)
			b = binary.AppendUvarint(b, uint64(n.parent))
			b = append(b, flagBody)
			b = binary.AppendUvarint(b, n.seq)
		}
		return b
	}
	tests := []struct {
		name string
		in   []enc
		want []Node
	}{
		{"ordered", []enc{{1, "a", 0, 1}, {2, "b", 1, 2}},
			[]Node{{Rev: Rev{1, "a"}, Body: true, Seq: 1}, {Rev: Rev{2, "b"}, Parent: Rev{1, "a"}, Body: true, Seq: 2}}},
		{"reversed", []enc{{2, "b", 2, 2}, {1, "a", 0, 1}},
			[]Node{{Rev: Rev{1, "a"}, Body: true, Seq: 1}, {Rev: Rev{2, "b"}, Parent: Rev{1, "a"}, Body: true, Seq: 2}}},
		{"repeat, last wins", []enc{{1, "a", 0, 1}, {2, "b", 1, 2}, {1, "a", 0, 7}},
			[]Node{{Rev: Rev{1, "a"}, Body: true, Seq: 7}, {Rev: Rev{2, "b"}, Parent: Rev{1, "a"}, Body: true, Seq: 2}}},
		{"adjacent repeat, last wins", []enc{{1, "a", 0, 1}, {1, "a", 0, 3}},
			[]Node{{Rev: Rev{1, "a"}, Body: true, Seq: 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, _, err := Decode(encode(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.Nodes(); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if w, _ := tr.Winner(); w.Rev != tc.want[len(tc.want)-1].Rev {
				t.Fatalf("winner %v", w.Rev)
			}
		})
	}
}

// TestRevText checks AppendText, TextLen and Spells against String.
func TestRevText(t *testing.T) {
	revs := []Rev{{1, "abc"}, {9, ""}, {10, "x"}, {123456789, "0123456789abcdef0123456789abcdef"}, {0, "z"}, {-12, "n"}}
	for _, r := range revs {
		s := r.String()
		if got := string(r.AppendText([]byte("p:"))); got != "p:"+s {
			t.Errorf("%v AppendText = %q, want %q", r, got, "p:"+s)
		}
		if r.TextLen() != len(s) {
			t.Errorf("%v TextLen = %d, want %d", r, r.TextLen(), len(s))
		}
		if !r.Spells(s) {
			t.Errorf("%v does not spell %q", r, s)
		}
		for _, other := range []string{s + "0", "0" + s, "2-abc", "1-abd", "1-ab", "", "-abc", "1abc"} {
			if other != s && r.Spells(other) {
				t.Errorf("%v spells %q", r, other)
			}
		}
	}
}

// TestMaxEncodedLen checks that the bound holds for trees with large
// generations, seqs and long hashes.
func TestMaxEncodedLen(t *testing.T) {
	var tr Tree
	tr.Merge(Path{Start: 1 << 40, IDs: []string{strings.Repeat("h", 300), "b", "a"}}, true, true, 1<<62)
	tr.Merge(Path{Start: 3, IDs: []string{"c", "b", "a"}}, false, true, 7)
	if n := len(tr.AppendEncode(nil)); n > tr.MaxEncodedLen() {
		t.Errorf("encoding is %d bytes, bound %d", n, tr.MaxEncodedLen())
	}
	var empty Tree
	if n := len(empty.AppendEncode(nil)); n > empty.MaxEncodedLen() {
		t.Errorf("empty encoding is %d bytes, bound %d", n, empty.MaxEncodedLen())
	}
}
