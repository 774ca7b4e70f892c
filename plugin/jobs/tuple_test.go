package jobs

import (
	"bytes"
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
