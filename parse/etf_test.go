package parse

import (
	"bytes"
	"encoding/json"
	"math/big"
	"testing"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// TestTermToBinary checks encodings against what Erlang/OTP's
// term_to_binary(T, [{minor_version, 1}]) returns for the same terms.
func TestTermToBinary(t *testing.T) {
	huge, _ := new(big.Int).SetString("-18446744073709551616", 10) // -(2^64)
	tests := []struct {
		name string
		term any
		want []byte
	}{
		{"[]", []any{}, []byte{131, 106}},
		{"\"\"", etfCharList(""), []byte{131, 106}},
		{"1", 1, []byte{131, 97, 1}},
		{"256", 256, []byte{131, 98, 0, 0, 1, 0}},
		{"-1", -1, []byte{131, 98, 255, 255, 255, 255}},
		{"2147483648", json.Number("2147483648"), []byte{131, 110, 4, 0, 0, 0, 0, 128}},
		{"-(2^64)", huge, []byte{131, 110, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"1.5", json.Number("1.5"), []byte{131, 70, 63, 248, 0, 0, 0, 0, 0, 0}},
		{"1.0e0 is a float", json.Number("1e0"), []byte{131, 70, 63, 240, 0, 0, 0, 0, 0, 0}},
		{"\"abc\"", etfCharList("abc"), []byte{131, 107, 0, 3, 'a', 'b', 'c'}},
		{"<<\"abc\">>", "abc", []byte{131, 109, 0, 0, 0, 3, 'a', 'b', 'c'}},
		{"remote", etfAtom("remote"), []byte{131, 100, 0, 6, 'r', 'e', 'm', 'o', 't', 'e'}},
		{"{a,[1]}", etfTuple{etfAtom("a"), []any{1}}, []byte{131, 104, 2, 100, 0, 1, 'a', 108, 0, 0, 0, 1, 97, 1, 106}},
		{"{[{<<\"k\">>,null}]}", jsonobj.Ordered{{Key: "k", Value: nil}},
			[]byte{131, 104, 1, 108, 0, 0, 0, 1, 104, 2, 109, 0, 0, 0, 1, 'k', 100, 0, 4, 'n', 'u', 'l', 'l', 106}},
		{"true", true, []byte{131, 100, 0, 4, 't', 'r', 'u', 'e'}},
	}
	for _, tt := range tests {
		if got := termToBinary(tt.term); !bytes.Equal(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
