package jobs

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/couchepi/couchepi/plugin/kv"
)

func TestTupleOrder(t *testing.T) {
	// Each tuple must sort strictly before the next one.
	ordered := [][]any{
		{1, "a"},
		{1, "a", int64(-5)},
		{1, "a", int64(0)},
		{1, "a", int64(7)},
		{1, "a\x00"},
		{1, "a\x00b"},
		{1, "a\x01"},
		{1, "ab"},
		{1, "b"},
		{2, "", vsElem(kv.NewVersionstamp(1, 0))},
		{2, "", vsElem(kv.NewVersionstamp(1, 1))},
		{2, "", vsElem(kv.NewVersionstamp(2, 0))},
		{2, "x"},
	}
	for i := 1; i < len(ordered); i++ {
		a, b := pack(nil, ordered[i-1]...), pack(nil, ordered[i]...)
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("%v should sort before %v", ordered[i-1], ordered[i])
		}
	}
}

func TestTupleRoundTrip(t *testing.T) {
	cases := [][]any{
		{int64(1), "id"},
		{"with\x00nul", int64(-1 << 40), vsElem(kv.NewVersionstamp(9, 3))},
		{""},
	}
	for _, c := range cases {
		got, err := unpack(pack(nil, c...))
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c) {
			t.Errorf("round trip %v: got %v %v", c, got, err)
		}
	}
	for _, bad := range [][]byte{{tagString, 'a'}, {tagInt, 1}, {tagVS}, {0x7f}} {
		if _, err := unpack(bad); err == nil {
			t.Errorf("unpack(%x) accepted malformed input", bad)
		}
	}
}

// TestDecodeTuple: a tuple with other elements than expected, or a
// different count, is errBadKey, never a panic (a key written by another
// version of the queue, or damaged).
func TestDecodeTuple(t *testing.T) {
	good := pack(nil, "a", int64(7))
	var s string
	var n int64
	if err := decodeTuple(good, &s, &n); err != nil || s != "a" || n != 7 {
		t.Fatalf("decode: %q %d %v", s, n, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"types swapped", pack(nil, int64(7), "a")},
		{"too few", pack(nil, "a")},
		{"too many", pack(nil, "a", int64(7), "b")},
		{"versionstamp for a string", pack(nil, vsElem{}, int64(7))},
		{"garbage", []byte{0x99, 0x01}},
	} {
		if err := decodeTuple(tc.b, &s, &n); err != errBadKey {
			t.Errorf("%s: %v, want errBadKey", tc.name, err)
		}
	}
	if err := decodeKey([]byte("p"), append([]byte("q"), good...), &s, &n); err != errBadKey {
		t.Errorf("other prefix: %v", err)
	}
}

// TestMalformedKeysDoNotPanic (issue 32): a key in the queue's spaces that
// does not decode as this version writes it (another version's, or
// damaged) makes the operation fail with an error; it never panics an
// acceptor, a monitor or a fold on a shared queue.
func TestMalformedKeysDoNotPanic(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		key  func(l layout) []byte
		op   func(q *Queue) error
	}{
		{"pending entry", func(l layout) []byte { return pack(l.pendingType(typ), "not-a-time", int64(1)) },
			func(q *Queue) error { _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); return err }},
		{"job row key", func(l layout) []byte { return pack(l.jobs(typ), int64(1)) },
			func(q *Queue) error { return q.Fold(ctx, typ, func(string, State, []byte) error { return nil }) }},
		{"type timeout key", func(l layout) []byte { return pack(l.timeouts(), int64(1)) },
			func(q *Queue) error { return q.monitorOnce(ctx, map[string]*monitorType{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := kv.NewMemory()
			defer s.Close()
			q := newQueue(t, s, Options{})
			if err := s.Update(ctx, func(tx kv.Tx) error { tx.Set(tc.key(q.l), []byte{}); return nil }); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panicked: %v", p)
				}
			}()
			if err := tc.op(q); err == nil {
				t.Fatal("no error for a malformed key")
			}
		})
	}
}
