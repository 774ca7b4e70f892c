package store

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// couchRevHash is the hash of a new edit's revision id exactly as CouchDB
// 3.x computes it (couch_db:new_revid): the md5 of
//
//	term_to_binary([Deleted, OldStart, OldRev, Body, Atts], [{minor_version, 1}])
//
// where OldStart and OldRev are the parent's generation and id (0 and 0
// for a new document; a 32-hex-digit id as its 16 bytes), Body is the
// document body as jiffy decodes it (objects {[{Key, Value}]} with
// duplicate keys dropped but the last, strings as binaries, integers and
// floats, true/false/null as atoms), and Atts lists {Name, Type, Md5} for
// the attachments in reverse order. The same edit on CouchDB and on
// minicouch therefore gets the same revision id.
func couchRevHash(deleted bool, parentGen uint64, parentHash string, body []byte, atts []storedAtt) string {
	e := etfPool.Get().(*etf)
	defer func() {
		if cap(e.buf) <= 1<<20 { // a big document's buffer is not kept
			etfPool.Put(e)
		}
	}()
	e.buf, e.stack = e.buf[:0], e.stack[:0]
	e.buf = append(e.buf, 131)
	e.listHeader(5)
	e.atom(strconv.FormatBool(deleted))
	e.uint(parentGen)
	if parentGen == 0 && parentHash == "" {
		e.uint(0)
	} else {
		e.binary(revIDBytes(parentHash))
	}
	if err := e.json(body); err != nil {
		// Bodies are valid JSON by now; keep the id deterministic anyway.
		e.binary(body)
	}
	e.listHeader(len(atts))
	for i := len(atts) - 1; i >= 0; i-- {
		a := atts[i]
		e.tupleHeader(3)
		e.binary([]byte(a.Name))
		e.binary([]byte(a.ContentType))
		e.binary(digestBytes(a.Digest))
	}
	e.nil()
	e.nil()
	sum := md5.Sum(e.buf)
	return hex.EncodeToString(sum[:])
}

// revIDBytes is a revision id as CouchDB keeps it (couch_doc:parse_revid):
// 32 hex digits as the 16 bytes they spell, anything else as it is.
func revIDBytes(id string) []byte {
	if len(id) == 32 {
		if b, err := hex.DecodeString(id); err == nil {
			return b
		}
	}
	return []byte(id)
}

// digestBytes is an attachment's md5 as CouchDB keeps it: the bytes of
// "md5-<base64>".
func digestBytes(digest string) []byte {
	if b64, ok := strings.CutPrefix(digest, "md5-"); ok {
		if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return b
		}
	}
	return []byte(digest)
}

// etfPool keeps encoders, whose buffers grow to the documents written.
var etfPool = sync.Pool{New: func() any { return &etf{} }}

// etf writes Erlang's external term format as term_to_binary does with
// {minor_version, 1}.
type etf struct {
	buf   []byte
	stack []span
}

func (e *etf) atom(s string) {
	e.buf = append(e.buf, 100) // ATOM_EXT, latin-1
	e.buf = binary.BigEndian.AppendUint16(e.buf, uint16(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *etf) binary(b []byte) {
	e.buf = append(e.buf, 109) // BINARY_EXT
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(len(b)))
	e.buf = append(e.buf, b...)
}

func (e *etf) listHeader(n int) {
	if n == 0 {
		return // the empty list is the tail alone
	}
	e.buf = append(e.buf, 108) // LIST_EXT
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n))
}

func (e *etf) nil() { e.buf = append(e.buf, 106) } // NIL_EXT

func (e *etf) tupleHeader(n int) { e.buf = append(e.buf, 104, byte(n)) } // SMALL_TUPLE_EXT

func (e *etf) uint(n uint64) {
	if n <= math.MaxInt64 {
		e.int(int64(n))
		return
	}
	e.bigInt(new(big.Int).SetUint64(n))
}

func (e *etf) int(n int64) {
	switch {
	case n >= 0 && n <= 255:
		e.buf = append(e.buf, 97, byte(n)) // SMALL_INTEGER_EXT
	case n >= math.MinInt32 && n <= math.MaxInt32:
		e.buf = append(e.buf, 98) // INTEGER_EXT
		e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(int32(n)))
	default:
		e.bigInt(big.NewInt(n))
	}
}

func (e *etf) bigInt(n *big.Int) {
	if n.IsInt64() && n.Int64() >= math.MinInt32 && n.Int64() <= math.MaxInt32 {
		e.int(n.Int64())
		return
	}
	mag := new(big.Int).Abs(n).Bytes() // big-endian
	if len(mag) <= 255 {
		e.buf = append(e.buf, 110, byte(len(mag))) // SMALL_BIG_EXT
	} else {
		e.buf = append(e.buf, 111) // LARGE_BIG_EXT
		e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(len(mag)))
	}
	if n.Sign() < 0 {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
	for i := len(mag) - 1; i >= 0; i-- { // little-endian digits
		e.buf = append(e.buf, mag[i])
	}
}

func (e *etf) float(f float64) {
	e.buf = append(e.buf, 70) // NEW_FLOAT_EXT
	e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(f))
}

// json writes the JSON value v as the term jiffy decodes it to.
func (e *etf) json(v []byte) error {
	v = v[jsonscan.SkipSpace(v, 0):]
	for len(v) > 0 && isSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	if len(v) == 0 {
		return jsonscan.ErrNotObject
	}
	switch v[0] {
	case '{':
		return e.object(v)
	case '[':
		return e.array(v)
	case '"':
		return e.str(v)
	case 't':
		e.atom("true")
	case 'f':
		e.atom("false")
	case 'n':
		e.atom("null")
	default:
		return e.number(v)
	}
	return nil
}

// span is a part of the JSON being encoded: a member's raw key and value,
// or an array element (key nil). The spans of the objects and arrays
// being encoded share one stack.
type span struct{ key, val []byte }

func (e *etf) object(v []byte) error {
	base := len(e.stack)
	defer func() { e.stack = e.stack[:base] }()
	if err := jsonscan.Members(v, func(rawKey, val []byte) error {
		e.stack = append(e.stack, span{rawKey, val})
		return nil
	}); err != nil {
		return err
	}
	members := e.stack[base:]
	// jiffy's dedupe_keys: a repeated key keeps its last value, at its
	// last place.
	n := 0
	if len(members) <= 16 {
		for i := range members {
			if !repeatedLater(members, i) {
				n++
			} else {
				members[i].val = nil
			}
		}
	} else {
		seen := make(map[string]bool, len(members))
		for i := len(members) - 1; i >= 0; i-- {
			k, err := jsonscan.Unquote(members[i].key)
			if err != nil {
				return err
			}
			if seen[k] {
				members[i].val = nil
				continue
			}
			seen[k] = true
			n++
		}
	}
	e.tupleHeader(1)
	e.listHeader(n)
	for i := base; i < base+len(members); i++ {
		m := e.stack[i] // the stack may move while values are encoded
		if m.val == nil {
			continue
		}
		e.tupleHeader(2)
		if err := e.str(m.key); err != nil {
			return err
		}
		if err := e.json(m.val); err != nil {
			return err
		}
	}
	e.nil()
	return nil
}

// repeatedLater reports whether member i's key appears again after it
// (keys spelt with escapes compared decoded).
func repeatedLater(members []span, i int) bool {
	k := members[i].key
	kEscaped := bytes.IndexByte(k, '\\') >= 0
	for _, m := range members[i+1:] {
		if bytes.Equal(m.key, k) {
			return true
		}
		if kEscaped || bytes.IndexByte(m.key, '\\') >= 0 {
			a, err1 := jsonscan.Unquote(k)
			b, err2 := jsonscan.Unquote(m.key)
			if err1 == nil && err2 == nil && a == b {
				return true
			}
		}
	}
	return false
}

func (e *etf) array(v []byte) error {
	base := len(e.stack)
	defer func() { e.stack = e.stack[:base] }()
	if err := eachElement(v, func(el []byte) error {
		e.stack = append(e.stack, span{val: el})
		return nil
	}); err != nil {
		return err
	}
	n := len(e.stack) - base
	// term_to_binary writes a list of bytes (integers 0..255) as a
	// string.
	if n > 0 && n <= math.MaxUint16 && allBytes(e.stack[base:]) {
		e.buf = append(e.buf, 107) // STRING_EXT
		e.buf = binary.BigEndian.AppendUint16(e.buf, uint16(n))
		for _, el := range e.stack[base:] {
			b, _ := smallUint(el.val)
			e.buf = append(e.buf, byte(b))
		}
		return nil
	}
	e.listHeader(n)
	for i := base; i < base+n; i++ {
		if err := e.json(e.stack[i].val); err != nil {
			return err
		}
	}
	e.nil()
	return nil
}

func allBytes(elems []span) bool {
	for _, el := range elems {
		if n, ok := smallUint(el.val); !ok || n > 255 {
			return false
		}
	}
	return true
}

// smallUint parses a JSON integer of up to 18 digits without a sign.
func smallUint(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// str writes a raw JSON string as the binary of its UTF-8 bytes.
func (e *etf) str(raw []byte) error {
	if len(raw) < 2 {
		return jsonscan.ErrNotObject
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		e.binary(inner)
		return nil
	}
	s, err := jsonscan.Unquote(raw)
	if err != nil {
		return err
	}
	e.buf = append(e.buf, 109) // BINARY_EXT
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(len(s)))
	e.buf = append(e.buf, s...)
	return nil
}

func (e *etf) number(v []byte) error {
	if bytes.IndexAny(v, ".eE") < 0 {
		neg := v[0] == '-'
		digits := v
		if neg {
			digits = v[1:]
		}
		if n, ok := smallUint(digits); ok {
			if neg {
				n = -n
			}
			e.int(n)
			return nil
		}
		n, ok := new(big.Int).SetString(string(v), 10)
		if !ok {
			return strconv.ErrSyntax
		}
		e.bigInt(n)
		return nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return err
	}
	e.float(f)
	return nil
}

// eachElement calls fn for each element of the valid JSON array arr.
func eachElement(arr []byte, fn func(el []byte) error) error {
	i := jsonscan.SkipSpace(arr, 1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for i < len(arr) {
		end := jsonscan.SkipValue(arr, i)
		if end == i {
			return jsonscan.ErrNotObject
		}
		if err := fn(arr[i:end]); err != nil {
			return err
		}
		i = jsonscan.SkipSpace(arr, end)
		if i >= len(arr) || arr[i] == ']' {
			return nil
		}
		i = jsonscan.SkipSpace(arr, i+1) // past the comma
	}
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
