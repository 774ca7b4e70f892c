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
	stack []member
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
	i := jsonscan.SkipSpace(v, 0)
	if i == len(v) {
		return jsonscan.ErrNotObject
	}
	_, err := e.value(v, i)
	return err
}

// value writes the term of the valid JSON value at b[i] and returns the
// index after it. Each byte of b is read once, however deeply objects and
// arrays nest (finding a nested value's end, then encoding it, would read
// a body nested n deep n times).
func (e *etf) value(b []byte, i int) (int, error) {
	switch b[i] {
	case '{':
		return e.object(b, i)
	case '[':
		return e.array(b, i)
	case '"':
		end := jsonscan.SkipString(b, i)
		return end, e.str(b[i:end])
	case 't':
		e.atom("true")
		return i + 4, nil
	case 'f':
		e.atom("false")
		return i + 5, nil
	case 'n':
		e.atom("null")
		return i + 4, nil
	}
	end := jsonscan.SkipValue(b, i)
	return end, e.number(b[i:end])
}

// member is an object member written to buf: its raw key and where its
// {Key, Value} tuple lies. The members of the objects being written share
// one stack.
type member struct {
	key        []byte
	start, end int
}

// object writes the object at b[i] as {[{Key, Value}, …]} and returns the
// index after it. Members are written as they come; then the earlier ones
// of a repeated key are cut out (jiffy's dedupe_keys: the last value wins,
// at its place) and the list's length is filled in.
func (e *etf) object(b []byte, i int) (int, error) {
	e.tupleHeader(1)
	i = jsonscan.SkipSpace(b, i+1)
	if b[i] == '}' {
		e.nil()
		return i + 1, nil
	}
	head := len(e.buf)
	e.listHeader(math.MaxUint32) // its length is set once known
	base := len(e.stack)
	defer func() { e.stack = e.stack[:base] }()
	for {
		kEnd := jsonscan.SkipString(b, i)
		m := member{key: b[i:kEnd], start: len(e.buf)}
		e.tupleHeader(2)
		if err := e.str(m.key); err != nil {
			return 0, err
		}
		end, err := e.value(b, jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, kEnd)+1)) // past the colon
		if err != nil {
			return 0, err
		}
		m.end = len(e.buf)
		e.stack = append(e.stack, m)
		i = jsonscan.SkipSpace(b, end)
		if b[i] == '}' {
			break
		}
		i = jsonscan.SkipSpace(b, i+1) // past the comma
	}
	n, err := e.dedupe(e.stack[base:])
	if err != nil {
		return 0, err
	}
	binary.BigEndian.PutUint32(e.buf[head+1:], uint32(n))
	e.nil()
	return i + 1, nil
}

// dedupe cuts out of buf the members (the last written) whose key is
// repeated later, keeping the others in order, and returns how many are
// kept.
func (e *etf) dedupe(members []member) (int, error) {
	drop := make([]bool, len(members))
	dropped := 0
	if len(members) <= 16 {
		for i := range members {
			if repeatedLater(members, i) {
				drop[i] = true
				dropped++
			}
		}
	} else {
		seen := make(map[string]bool, len(members))
		for i := len(members) - 1; i >= 0; i-- {
			k, err := jsonscan.Unquote(members[i].key)
			if err != nil {
				return 0, err
			}
			if seen[k] {
				drop[i] = true
				dropped++
				continue
			}
			seen[k] = true
		}
	}
	if dropped == 0 {
		return len(members), nil
	}
	w := members[0].start
	for i, m := range members {
		if !drop[i] {
			w += copy(e.buf[w:], e.buf[m.start:m.end])
		}
	}
	e.buf = e.buf[:w]
	return len(members) - dropped, nil
}

// repeatedLater reports whether member i's key appears again after it
// (keys spelt with escapes compared decoded).
func repeatedLater(members []member, i int) bool {
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

// array writes the array at b[i] as a list and returns the index after
// it. term_to_binary writes a list of bytes (integers 0..255) as a string:
// such a list, written element by element as small integers, is rewritten
// so once it ends.
func (e *etf) array(b []byte, i int) (int, error) {
	i = jsonscan.SkipSpace(b, i+1)
	if b[i] == ']' {
		e.nil()
		return i + 1, nil
	}
	head := len(e.buf)
	e.listHeader(math.MaxUint32) // its length is set once known
	n, bytesOnly := 0, true
	for {
		end, err := e.value(b, i)
		if err != nil {
			return 0, err
		}
		if bytesOnly {
			v, ok := smallUint(b[i:end])
			bytesOnly = ok && v <= 255
		}
		n++
		i = jsonscan.SkipSpace(b, end)
		if b[i] == ']' {
			break
		}
		i = jsonscan.SkipSpace(b, i+1) // past the comma
	}
	if bytesOnly && n <= math.MaxUint16 {
		// Each element is SMALL_INTEGER_EXT (97, byte) after the header.
		e.buf[head] = 107 // STRING_EXT
		binary.BigEndian.PutUint16(e.buf[head+1:], uint16(n))
		for k := 0; k < n; k++ {
			e.buf[head+3+k] = e.buf[head+5+2*k+1]
		}
		e.buf = e.buf[:head+3+n]
		return i + 1, nil
	}
	binary.BigEndian.PutUint32(e.buf[head+1:], uint32(n))
	e.nil()
	return i + 1, nil
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
