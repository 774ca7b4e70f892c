package jobs

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Order-preserving key encoding, a small cousin of FoundationDB's tuple
// layer: the byte order of encoded tuples equals the element-wise order of
// the tuples, so range reads over prefixes and ordered keys (stime,
// versionstamp) work on any backend.
//
//	string       0x02, bytes with 0x00 escaped as 0x00 0xFF, terminator 0x00
//	int64        0x15, 8 bytes big-endian with the sign bit flipped
//	versionstamp 0x33, 10 raw bytes (fixed width, so FoundationDB can fill
//	             in a placeholder at commit)
const (
	tagString = 0x02
	tagInt    = 0x15
	tagVS     = 0x33
)

// vsElem marks a versionstamp element in a tuple.
type vsElem kv.Versionstamp

var errBadKey = errors.New("jobs: malformed key")

// pack appends the encoding of elems (string, int64, int or vsElem) to dst.
func pack(dst []byte, elems ...any) []byte {
	for _, e := range elems {
		switch v := e.(type) {
		case string:
			dst = append(dst, tagString)
			for i := 0; i < len(v); i++ {
				dst = append(dst, v[i])
				if v[i] == 0 {
					dst = append(dst, 0xFF)
				}
			}
			dst = append(dst, 0)
		case int:
			dst = packInt(dst, int64(v))
		case int64:
			dst = packInt(dst, v)
		case vsElem:
			dst = append(dst, tagVS)
			dst = append(dst, v[:]...)
		default:
			panic("jobs: unsupported tuple element")
		}
	}
	return dst
}

func packInt(dst []byte, v int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v)^(1<<63))
	return append(append(dst, tagInt), b[:]...)
}

// unpack decodes a packed tuple.
func unpack(b []byte) ([]any, error) {
	var out []any
	for len(b) > 0 {
		switch b[0] {
		case tagString:
			var s []byte
			i := 1
			for {
				if i >= len(b) {
					return nil, errBadKey
				}
				if b[i] == 0 {
					if i+1 < len(b) && b[i+1] == 0xFF {
						s = append(s, 0)
						i += 2
						continue
					}
					break
				}
				s = append(s, b[i])
				i++
			}
			out = append(out, string(s))
			b = b[i+1:]
		case tagInt:
			if len(b) < 9 {
				return nil, errBadKey
			}
			out = append(out, int64(binary.BigEndian.Uint64(b[1:9])^(1<<63)))
			b = b[9:]
		case tagVS:
			if len(b) < 11 {
				return nil, errBadKey
			}
			var v kv.Versionstamp
			copy(v[:], b[1:11])
			out = append(out, vsElem(v))
			b = b[11:]
		default:
			return nil, errBadKey
		}
	}
	return out, nil
}

// unpackAfter decodes the part of key after prefix.
func unpackAfter(prefix, key []byte) ([]any, error) {
	if !bytes.HasPrefix(key, prefix) {
		return nil, errBadKey
	}
	return unpack(key[len(prefix):])
}

// decodeTuple decodes the tuple b into dst, each a *string, *int64 or
// *vsElem: errBadKey unless b holds exactly elements of those types. A
// key or value written by another version (or damaged) is an error, never
// a panic of the process reading it.
func decodeTuple(b []byte, dst ...any) error {
	el, err := unpack(b)
	if err != nil || len(el) != len(dst) {
		return errBadKey
	}
	return assign(el, dst)
}

// decodeTupleHead is decodeTuple for a value a newer version may extend:
// elements after the first len(dst) are ignored (a newer version's
// fields, which this one neither needs nor rewrites).
func decodeTupleHead(b []byte, dst ...any) error {
	el, err := unpack(b)
	if err != nil || len(el) < len(dst) {
		return errBadKey
	}
	return assign(el[:len(dst)], dst)
}

// assign stores the elements el into dst (decodeTuple).
func assign(el []any, dst []any) error {
	for i, d := range dst {
		ok := false
		switch p := d.(type) {
		case *string:
			*p, ok = el[i].(string)
		case *int64:
			*p, ok = el[i].(int64)
		case *vsElem:
			*p, ok = el[i].(vsElem)
		}
		if !ok {
			return errBadKey
		}
	}
	return nil
}

// decodeKey is decodeTuple of the part of key after prefix.
func decodeKey(prefix, key []byte, dst ...any) error {
	if !bytes.HasPrefix(key, prefix) {
		return errBadKey
	}
	return decodeTuple(key[len(prefix):], dst...)
}
