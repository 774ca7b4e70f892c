package couchapi

import (
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

// A minicouch db is one shard covering the whole ring, on one node, so
// its sequences are those CouchDB 3.x gives a db created with q=1:
// "<N>-<opaque>", the opaque part being unpadded base64url of the
// compressed Erlang term [{Node, [0, 16#ffffffff], {N, UUIDPrefix, Node}}]
// (fabric_view_changes:pack_seqs). Tools and CouchDB's tests that decode
// it find the shard range, the seq and the db's uuid; clients that treat
// it as opaque send it back as since.

// ringEnd is the end of the single shard's range, 2^32 - 1.
const ringEnd = 1<<32 - 1

// uuidPrefixLen is how much of a db's uuid a sequence names (CouchDB's
// [fabric] uuid_prefix_len default).
const uuidPrefixLen = 7

// seqFormat renders and reads the sequences of one node's dbs.
type seqFormat struct {
	node string
}

// format renders store sequence seq of the db whose uuid is dbUUID.
func (f seqFormat) format(seq uint64, dbUUID string) string {
	var buf [160]byte
	term := buf[:0]
	term = append(term, etfList, 0, 0, 0, 1, etfSmallTuple, 3)
	term = appendETFAtom(term, f.node)
	term = append(term, etfList, 0, 0, 0, 2, etfSmallInt, 0)
	term = appendETFUint(term, ringEnd)
	term = append(term, etfNil, etfSmallTuple, 3)
	term = appendETFUint(term, seq)
	term = appendETFBinary(term, uuidPrefix(dbUUID))
	term = appendETFAtom(term, f.node)
	term = append(term, etfNil)
	var packedBuf [192]byte
	packed := appendETFCompressed(packedBuf[:0], term)
	var out [288]byte
	s := strconv.AppendUint(out[:0], seq, 10)
	s = append(s, '-')
	s = base64.RawURLEncoding.AppendEncode(s, packed)
	return string(s)
}

func uuidPrefix(uuid string) string {
	if len(uuid) > uuidPrefixLen {
		return uuid[:uuidPrefixLen]
	}
	return uuid
}

// parseSince parses a `since` value of the db whose uuid is dbUUID: 0,
// now, a number, or a sequence, quoted or not. now yields current; ok is
// false for anything else. Sequences are read as CouchDB reads them: the
// opaque part decides, the "N-" before it is optional. One that names
// this db's shard gives its seq; one from another db (another uuid) or
// with another shard layout starts over at 0, as CouchDB rewinds shards
// it cannot match. minicouch's sequences before these ("N-g1<hex>",
// in checkpoints replicators stored) give their N.
func parseSince(raw string, current uint64, dbUUID string) (uint64, bool) {
	raw = strings.TrimSpace(raw)
	if strings.HasPrefix(raw, `"`) {
		var s string
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return 0, false
		}
		raw = s
	}
	switch raw {
	case "", "0":
		return 0, true
	case "now":
		return current, true
	}
	prefix, opaque, found := strings.Cut(raw, "-")
	if !found {
		opaque = raw
	}
	num, numErr := strconv.ParseUint(prefix, 10, 64)
	if !found && numErr == nil {
		return num, true // a bare number
	}
	if found && numErr != nil {
		// No "N-" prefix: the dash belongs to the opaque part.
		opaque = raw
	}
	if seq, ok := unpackSeq(opaque, dbUUID); ok {
		return seq, true
	}
	if found && numErr == nil {
		return num, true
	}
	return 0, false
}

// unpackSeq reads the opaque part of a CouchDB sequence: the seq of the
// single shard covering the ring, 0 when the term names another db or
// another shard layout; ok is false when it is not such a term.
func unpackSeq(opaque, dbUUID string) (uint64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(opaque, "="))
	if err != nil {
		return 0, false
	}
	v, err := decodeETF(b)
	if err != nil {
		return 0, false
	}
	shards, ok := v.([]any)
	if !ok || len(shards) == 0 {
		return 0, false
	}
	var best uint64
	matched := false
	for _, e := range shards {
		t, ok := e.(etfTuple)
		if !ok || len(t) != 3 {
			return 0, false
		}
		if _, ok := t[0].(etfAtomValue); !ok {
			return 0, false
		}
		r, ok := t[1].([]any)
		if !ok || len(r) != 2 {
			return 0, false
		}
		seq, sameDB, ok := shardSeq(t[2], dbUUID)
		if !ok {
			return 0, false
		}
		if r[0] != uint64(0) || r[1] != uint64(ringEnd) || !sameDB {
			continue
		}
		// As CouchDB: the same shard listed twice counts at its largest.
		best, matched = max(best, seq), true
	}
	if !matched {
		return 0, true
	}
	return best, true
}

// shardSeq reads one shard's entry: N, {N, Uuid} or {N, Uuid, EpochNode}.
// sameDB is false when the uuid is not dbUUID's or the shard was split.
func shardSeq(v any, dbUUID string) (seq uint64, sameDB, ok bool) {
	switch x := v.(type) {
	case uint64:
		return x, true, true
	case *big.Int:
		return 0, false, x.Sign() >= 0
	case etfTuple:
		if len(x) < 2 || len(x) > 3 {
			return 0, false, false
		}
		n, ok := x[0].(uint64)
		if !ok {
			return 0, false, false
		}
		uuid, ok := x[1].([]byte)
		if !ok {
			if split, isTuple := x[1].(etfTuple); isTuple && len(split) == 2 && split[0] == etfAtomValue("split") {
				return 0, false, true
			}
			return 0, false, false
		}
		return n, len(uuid) > 0 && strings.HasPrefix(dbUUID, string(uuid)), true
	}
	return 0, false, false
}

// sinceParam turns a decoded JSON since (number or string) into the string form.
func sinceParam(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	}
	return ""
}
