package parse

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/big"
	"strings"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// Erlang External Term Format, the subset CouchDB's replication ids hash
// (term_to_binary/2 with {minor_version, 1}). Go values map to terms:
//
//	etfAtom      -> atom (ATOM_EXT)
//	etfCharList  -> string (STRING_EXT; NIL_EXT when empty)
//	string       -> binary (BINARY_EXT)
//	etfTuple     -> tuple
//	[]any        -> proper list
//	int, *big.Int, json.Number -> integer, or float when the number has a
//	                              fraction or exponent (NEW_FLOAT_EXT)
//	float64      -> float
//	bool, nil    -> atoms true/false/null (EJSON)
//	object       -> EJSON object: {[{KeyBinary, Value}, …]}
type (
	etfAtom     string
	etfCharList string
	etfTuple    []any
)

// External Term Format tags.
const (
	tagVersion     = 131
	tagNewFloat    = 70
	tagSmallInt    = 97
	tagInt         = 98
	tagSmallTuple  = 104
	tagLargeTuple  = 105
	tagNil         = 106
	tagString      = 107
	tagList        = 108
	tagBinary      = 109
	tagSmallBig    = 110
	tagLargeBig    = 111
	tagAtom        = 100
	tagAtomUTF8    = 118
	maxStringBytes = 65535
)

// termToBinary encodes v as term_to_binary(V, [{minor_version, 1}]) does.
func termToBinary(v any) []byte {
	b := make([]byte, 0, 256)
	b = append(b, tagVersion)
	return appendTerm(b, v)
}

func appendTerm(b []byte, v any) []byte {
	switch t := v.(type) {
	case etfAtom:
		return appendAtom(b, string(t))
	case bool:
		if t {
			return appendAtom(b, "true")
		}
		return appendAtom(b, "false")
	case nil:
		return appendAtom(b, "null")
	case etfCharList:
		return appendCharList(b, string(t))
	case string:
		b = append(b, tagBinary)
		b = binary.BigEndian.AppendUint32(b, uint32(len(t)))
		return append(b, t...)
	case etfTuple:
		if len(t) <= 255 {
			b = append(b, tagSmallTuple, byte(len(t)))
		} else {
			b = append(b, tagLargeTuple)
			b = binary.BigEndian.AppendUint32(b, uint32(len(t)))
		}
		for _, e := range t {
			b = appendTerm(b, e)
		}
		return b
	case []any:
		if len(t) == 0 {
			return append(b, tagNil)
		}
		b = append(b, tagList)
		b = binary.BigEndian.AppendUint32(b, uint32(len(t)))
		for _, e := range t {
			b = appendTerm(b, e)
		}
		return append(b, tagNil)
	case []string:
		l := make([]any, len(t))
		for i, s := range t {
			l[i] = s
		}
		return appendTerm(b, l)
	case jsonobj.Ordered:
		pairs := make([]any, len(t))
		for i, f := range t {
			pairs[i] = etfTuple{f.Key, f.Value}
		}
		return appendTerm(b, etfTuple{pairs})
	case int:
		return appendBigInt(b, big.NewInt(int64(t)))
	case *big.Int:
		return appendBigInt(b, t)
	case float64:
		b = append(b, tagNewFloat)
		return binary.BigEndian.AppendUint64(b, math.Float64bits(t))
	case json.Number:
		return appendNumber(b, t.String())
	}
	panic("parse: cannot encode term of this type")
}

func appendAtom(b []byte, a string) []byte {
	latin1 := true
	for i := 0; i < len(a); i++ {
		if a[i] >= 0x80 {
			latin1 = false
		}
	}
	if latin1 {
		b = append(b, tagAtom)
	} else {
		b = append(b, tagAtomUTF8)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(a)))
	return append(b, a...)
}

// appendCharList encodes a byte string as an Erlang string (a list of
// bytes, as binary_to_list/1 makes it).
func appendCharList(b []byte, s string) []byte {
	switch {
	case s == "":
		return append(b, tagNil)
	case len(s) <= maxStringBytes:
		b = append(b, tagString)
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		return append(b, s...)
	}
	b = append(b, tagList)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	for i := 0; i < len(s); i++ {
		b = append(b, tagSmallInt, s[i])
	}
	return append(b, tagNil)
}

// appendNumber encodes a JSON number as CouchDB's JSON decoder would
// produce it: an integer unless it has a fraction or exponent.
func appendNumber(b []byte, n string) []byte {
	if !strings.ContainsAny(n, ".eE") {
		if i, ok := new(big.Int).SetString(n, 10); ok {
			return appendBigInt(b, i)
		}
	}
	f, _ := new(big.Float).SetString(n)
	var x float64
	if f != nil {
		x, _ = f.Float64()
	}
	b = append(b, tagNewFloat)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(x))
}

func appendBigInt(b []byte, i *big.Int) []byte {
	if i.IsInt64() {
		n := i.Int64()
		switch {
		case n >= 0 && n <= 255:
			return append(b, tagSmallInt, byte(n))
		case n >= math.MinInt32 && n <= math.MaxInt32:
			b = append(b, tagInt)
			return binary.BigEndian.AppendUint32(b, uint32(int32(n)))
		}
	}
	mag := i.Bytes() // big-endian magnitude
	sign := byte(0)
	if i.Sign() < 0 {
		sign = 1
	}
	if len(mag) <= 255 {
		b = append(b, tagSmallBig, byte(len(mag)), sign)
	} else {
		b = append(b, tagLargeBig)
		b = binary.BigEndian.AppendUint32(b, uint32(len(mag)))
		b = append(b, sign)
	}
	for k := len(mag) - 1; k >= 0; k-- {
		b = append(b, mag[k])
	}
	return b
}
