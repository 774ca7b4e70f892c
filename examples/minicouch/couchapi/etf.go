package couchapi

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"hash/adler32"
	"io"
	"math/big"
	"sync"
)

// The subset of Erlang's external term format that CouchDB's sequences
// use: lists, tuples, atoms, integers and binaries, optionally compressed
// (term_to_binary(T, [compressed])). CouchDB packs a clustered sequence's
// shard list in it; seq.go builds and reads those.

// Tags of the external term format (erts' external.h).
const (
	etfVersion      = 131
	etfCompressed   = 80
	etfSmallInt     = 97
	etfInt          = 98
	etfAtom         = 100
	etfSmallTuple   = 104
	etfLargeTuple   = 105
	etfNil          = 106
	etfString       = 107
	etfList         = 108
	etfBinary       = 109
	etfSmallBig     = 110
	etfSmallAtom    = 115
	etfAtomUTF8     = 118
	etfSmallAtomUTF = 119
)

// etfAtomValue is a decoded atom.
type etfAtomValue string

// etfTuple is a decoded tuple.
type etfTuple []any

// appendETFAtom appends an atom as OTP 26 writes it (UTF-8 atoms).
func appendETFAtom(b []byte, name string) []byte {
	if len(name) < 256 {
		return append(append(b, etfSmallAtomUTF, byte(len(name))), name...)
	}
	b = append(b, etfAtomUTF8)
	b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
	return append(b, name...)
}

// appendETFUint appends a non-negative integer in the smallest encoding
// Erlang uses for it.
func appendETFUint(b []byte, n uint64) []byte {
	switch {
	case n < 256:
		return append(b, etfSmallInt, byte(n))
	case n < 1<<31:
		return binary.BigEndian.AppendUint32(append(b, etfInt), uint32(n))
	}
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], n)
	size := 8
	for le[size-1] == 0 {
		size--
	}
	return append(append(b, etfSmallBig, byte(size), 0), le[:size]...)
}

// appendETFBinary appends a binary.
func appendETFBinary(b []byte, data string) []byte {
	b = binary.BigEndian.AppendUint32(append(b, etfBinary), uint32(len(data)))
	return append(b, data...)
}

// appendETFCompressed appends term (an encoded term without the version
// byte) as term_to_binary(T, [compressed]) frames it. The zlib stream is
// made of stored blocks: any inflater reads it and it costs nothing to
// make, though its bytes are not those zlib's deflate would choose.
func appendETFCompressed(b, term []byte) []byte {
	b = append(b, etfVersion, etfCompressed)
	b = binary.BigEndian.AppendUint32(b, uint32(len(term)))
	b = append(b, 0x78, 0x01) // zlib header: deflate, 32 KiB window, no preset dictionary
	rest := term
	for {
		n := min(len(rest), 0xffff)
		final := byte(0)
		if n == len(rest) {
			final = 1
		}
		b = append(b, final)
		b = binary.LittleEndian.AppendUint16(b, uint16(n))
		b = binary.LittleEndian.AppendUint16(b, ^uint16(n))
		b = append(b, rest[:n]...)
		rest = rest[n:]
		if final == 1 {
			break
		}
	}
	return binary.BigEndian.AppendUint32(b, adler32.Checksum(term))
}

// errETF is any term this decoder cannot read.
var errETF = errors.New("not an Erlang term CouchDB writes in a sequence")

// maxETFSize bounds an inflated term: a sequence's shard list is small.
const maxETFSize = 1 << 20

// decodeETF decodes a whole external term (version byte first; compressed
// or not) into []any lists, etfTuple, etfAtomValue, uint64 or *big.Int
// integers (int64 for negative ones that fit) and []byte binaries.
func decodeETF(b []byte) (any, error) {
	if len(b) < 2 || b[0] != etfVersion {
		return nil, errETF
	}
	b = b[1:]
	if b[0] == etfCompressed {
		if len(b) < 5 {
			return nil, errETF
		}
		size := binary.BigEndian.Uint32(b[1:5])
		if size > maxETFSize {
			return nil, errETF
		}
		raw, err := inflate(b[5:], int(size))
		if err != nil {
			return nil, errETF
		}
		b = raw
	}
	d := etfDecoder{b: b}
	v, err := d.term(0)
	if err != nil || len(d.b) != 0 {
		return nil, errETF
	}
	return v, nil
}

// inflaters keeps zlib readers: making one allocates tens of KiB.
var inflaters sync.Pool

// inflate reads a zlib stream that must inflate to exactly size bytes.
func inflate(b []byte, size int) ([]byte, error) {
	var zr io.ReadCloser
	var err error
	if v := inflaters.Get(); v != nil {
		zr = v.(io.ReadCloser)
		err = zr.(zlib.Resetter).Reset(bytes.NewReader(b), nil)
	} else {
		zr, err = zlib.NewReader(bytes.NewReader(b))
	}
	if err != nil {
		return nil, err
	}
	defer inflaters.Put(zr)
	out := make([]byte, size+1)
	n, err := io.ReadFull(zr, out)
	if err != io.ErrUnexpectedEOF || n != size {
		return nil, errETF
	}
	return out[:n], nil
}

type etfDecoder struct{ b []byte }

func (d *etfDecoder) take(n int) ([]byte, error) {
	if n < 0 || len(d.b) < n {
		return nil, errETF
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out, nil
}

func (d *etfDecoder) u8() (int, error) {
	b, err := d.take(1)
	if err != nil {
		return 0, err
	}
	return int(b[0]), nil
}

func (d *etfDecoder) u16() (int, error) {
	b, err := d.take(2)
	if err != nil {
		return 0, err
	}
	return int(binary.BigEndian.Uint16(b)), nil
}

func (d *etfDecoder) u32() (int, error) {
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxETFSize {
		return 0, errETF
	}
	return int(n), nil
}

// term decodes one term; depth bounds nesting.
func (d *etfDecoder) term(depth int) (any, error) {
	if depth > 64 {
		return nil, errETF
	}
	tag, err := d.u8()
	if err != nil {
		return nil, err
	}
	switch tag {
	case etfSmallInt:
		n, err := d.u8()
		return uint64(n), err
	case etfInt:
		b, err := d.take(4)
		if err != nil {
			return nil, err
		}
		n := int32(binary.BigEndian.Uint32(b))
		if n < 0 {
			return int64(n), nil
		}
		return uint64(n), nil
	case etfSmallBig:
		n, err := d.u8()
		if err != nil {
			return nil, err
		}
		return d.bignum(n)
	case etfAtom, etfAtomUTF8:
		n, err := d.u16()
		if err != nil {
			return nil, err
		}
		b, err := d.take(n)
		return etfAtomValue(b), err
	case etfSmallAtom, etfSmallAtomUTF:
		n, err := d.u8()
		if err != nil {
			return nil, err
		}
		b, err := d.take(n)
		return etfAtomValue(b), err
	case etfBinary:
		n, err := d.u32()
		if err != nil {
			return nil, err
		}
		return d.take(n)
	case etfNil:
		return []any{}, nil
	case etfString: // a list of small integers
		n, err := d.u16()
		if err != nil {
			return nil, err
		}
		b, err := d.take(n)
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		for i, c := range b {
			out[i] = uint64(c)
		}
		return out, nil
	case etfList:
		n, err := d.u32()
		if err != nil {
			return nil, err
		}
		out := make([]any, 0, min(n, 64))
		for range n {
			v, err := d.term(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if tail, err := d.u8(); err != nil || tail != etfNil {
			return nil, errETF // improper lists do not occur in sequences
		}
		return out, nil
	case etfSmallTuple, etfLargeTuple:
		var n int
		if tag == etfSmallTuple {
			n, err = d.u8()
		} else {
			n, err = d.u32()
		}
		if err != nil {
			return nil, err
		}
		out := make(etfTuple, 0, min(n, 64))
		for range n {
			v, err := d.term(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, errETF
}

// bignum reads the sign byte and n little-endian digits of a big integer:
// a uint64 when it fits, else a *big.Int.
func (d *etfDecoder) bignum(n int) (any, error) {
	sign, err := d.u8()
	if err != nil {
		return nil, err
	}
	le, err := d.take(n)
	if err != nil {
		return nil, err
	}
	be := make([]byte, n)
	for i, c := range le {
		be[n-1-i] = c
	}
	v := new(big.Int).SetBytes(be)
	if sign != 0 {
		v.Neg(v)
	} else if v.IsUint64() {
		return v.Uint64(), nil
	}
	return v, nil
}
