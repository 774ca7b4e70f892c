package kv

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
)

// Versionstamp is a 10-byte FoundationDB-style commit version: an 8-byte
// big-endian commit version followed by a 2-byte big-endian batch order.
// Byte order equals commit order, so versionstamps sort correctly inside keys.
type Versionstamp [10]byte

// NewVersionstamp builds a versionstamp from a commit version and batch order.
func NewVersionstamp(version uint64, batch uint16) Versionstamp {
	var v Versionstamp
	binary.BigEndian.PutUint64(v[:8], version)
	binary.BigEndian.PutUint16(v[8:], batch)
	return v
}

// Version returns the commit version part.
func (v Versionstamp) Version() uint64 { return binary.BigEndian.Uint64(v[:8]) }

// Compare returns -1, 0 or 1 as v sorts before, equal to or after w.
func (v Versionstamp) Compare(w Versionstamp) int { return bytes.Compare(v[:], w[:]) }

// String returns the versionstamp in hex.
func (v Versionstamp) String() string { return hex.EncodeToString(v[:]) }

// Placeholder returns a random versionstamp for a backend that learns a
// transaction's stamp only at commit (FoundationDB, etcd) to hand out
// and replace: 80 random bits, which no real key or value holds by chance.
func Placeholder() Versionstamp {
	var p Versionstamp
	rand.Read(p[:])
	return p
}
