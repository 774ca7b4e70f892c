package couchapi

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// Sequences made by Erlang/OTP's term_to_binary(T, [compressed]) and
// base64url, as CouchDB's fabric_view_changes:pack_seqs packs them, for a
// db whose uuid starts with 3ad1bba.
const (
	erlangSeqQ1      = "g1AAAABHeJzLYWBgYMxgTmHgzcvPy09JdcjLz8gvLskBCjMlMuSxMPwHgqwM5kStXKAQu3FiimFSUiK68iwA4bYWQA"                         // [{nonode@nohost,[0,4294967295],{42,<<"3ad1bba">>,nonode@nohost}}]
	erlangSeqQ1Big   = "g1AAAABVeJzLYWBgYMxgTmEQTM4vTc5ISXIwNDLXMwBCwxygFFMiQx4Lw38gyMpgzmNlYPjEqsWYC5RgN05MMUxKSsSmMQsAmfEWMA"             // {5000000000,…} on couchdb@127.0.0.1
	erlangSeqQ2      = "g1AAAACbeJzLYWBgYMpgTmEQTM4vTc5ISXIwNDLXMwBCwxyQVCJDUv3___-zMpgTmXOBAuzGiSmGSUmJ2DTgMSaPBUgyNACp_1DTWAiZlgUAUekpKQ" // two shards, seqs 3 and 4
	erlangSeqNoEpoch = "g2wAAAABaANkAA1ub25vZGVAbm9ob3N0bAAAAAJhAG4EAP____9qaAJhB20AAAAHM2FkMWJiYWo"                                        // {7,<<"3ad1bba">>}, not compressed
	erlangSeqInt     = "g2wAAAABaANkAA1ub25vZGVAbm9ob3N0bAAAAAJhAG4EAP____9qYQlq"                                                           // a bare 9
)

// TestSeqFormatDecodes: a sequence is "<N>-" and base64url of a
// compressed Erlang term listing one shard over the whole ring, its seq,
// the db's uuid prefix and the node, as CouchDB 3 packs a q=1 db's.
func TestSeqFormatDecodes(t *testing.T) {
	f := seqFormat{node: "nonode@nohost"}
	for _, n := range []uint64{0, 1, 255, 256, 1<<31 - 1, 1 << 31, 5000000000, 1<<64 - 1} {
		s := f.format(n, "3ad1bba0c0ffee")
		num, opaque, _ := strings.Cut(s, "-")
		if num != strconv.FormatUint(n, 10) {
			t.Errorf("%d: prefix %q", n, num)
		}
		if !strings.HasPrefix(opaque, "g1AAAA") {
			t.Errorf("%d: %q is not a compressed term", n, opaque)
		}
		b, err := base64.RawURLEncoding.DecodeString(opaque)
		if err != nil {
			t.Fatalf("%d: %v", n, err)
		}
		v, err := decodeETF(b)
		if err != nil {
			t.Fatalf("%d: %v", n, err)
		}
		want := []any{etfTuple{etfAtomValue("nonode@nohost"), []any{uint64(0), uint64(ringEnd)},
			etfTuple{n, []byte("3ad1bba"), etfAtomValue("nonode@nohost")}}}
		if !sameTerm(v, want) {
			t.Errorf("%d: decoded %#v", n, v)
		}
	}
}

// TestParseSince: since takes CouchDB's sequences (the opaque part
// decides, the "N-" is optional), minicouch's earlier "N-g1<hex>" ones,
// numbers, 0 and now.
func TestParseSince(t *testing.T) {
	const uuid = "3ad1bba0c0ffee"
	ours := seqFormat{node: "minicouch@127.0.0.1:5984"}.format(1234, uuid)
	_, oursOpaque, _ := strings.Cut(ours, "-")
	for _, tc := range []struct {
		since string
		want  uint64
		ok    bool
	}{
		{"", 0, true},
		{"0", 0, true},
		{`"0"`, 0, true},
		{"now", 99, true},
		{`"now"`, 99, true},
		{"17", 17, true},
		{ours, 1234, true},
		{`"` + ours + `"`, 1234, true},
		{oursOpaque, 1234, true},
		{"42-" + erlangSeqQ1, 42, true},
		{erlangSeqQ1, 42, true},
		{"1-" + erlangSeqQ1, 42, true}, // the prefix is only a hint
		{"5000000000-" + erlangSeqQ1Big, 5000000000, true},
		{"7-" + erlangSeqNoEpoch, 7, true},
		{"9-" + erlangSeqInt, 9, true},
		{"7-" + erlangSeqQ2, 0, true},   // another shard layout: from the start
		{"12-g1eadc911bf839", 12, true}, // minicouch's earlier format
		{"12-g1AAAAanything", 12, true}, // ditto, whatever follows
		{"1234-" + strings.Replace(ours, "1234-", "", 1), 1234, true},
		{"x", 0, false},
		{"-5", 0, false},
		{"g1AAAA", 0, false},
		{"1.5", 0, false},
		{`"unterminated`, 0, false},
	} {
		got, ok := parseSince(tc.since, 99, uuid)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSince(%q) = %d, %v; want %d, %v", tc.since, got, ok, tc.want, tc.ok)
		}
	}
	// A sequence of another db (another uuid) starts over, as CouchDB
	// rewinds a shard whose uuid it does not know.
	if got, ok := parseSince(ours, 99, "ffffffffffff"); got != 0 || !ok {
		t.Errorf("another db's seq: %d, %v", got, ok)
	}
}

// FuzzParseSince: no since value crashes the parser or the term decoder.
func FuzzParseSince(f *testing.F) {
	f.Add(seqFormat{node: "nonode@nohost"}.format(7, "3ad1bba"))
	f.Add("42-" + erlangSeqQ1)
	f.Add(erlangSeqQ2)
	f.Add("12-g1eadc911bf839")
	f.Fuzz(func(t *testing.T, since string) {
		parseSince(since, 5, "3ad1bba")
		if b, err := base64.RawURLEncoding.DecodeString(since); err == nil {
			decodeETF(b)
		}
	})
}

// sameTerm compares decoded terms.
func sameTerm(a, b any) bool {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameTerm(x[i], y[i]) {
				return false
			}
		}
		return true
	case etfTuple:
		y, ok := b.(etfTuple)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameTerm(x[i], y[i]) {
				return false
			}
		}
		return true
	case []byte:
		y, ok := b.([]byte)
		return ok && string(x) == string(y)
	}
	return a == b
}

// TestSequencesAreCouchDBs: update_seq, _changes seqs and last_seq decode
// as a single-shard CouchDB db's (the shard over the whole ring, the seq,
// the db's uuid prefix, the node), and since takes them back, as well as
// minicouch's earlier "N-g1<hex>" sequences a replicator may have
// checkpointed.
func TestSequencesAreCouchDBs(t *testing.T) {
	ts, srv := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "a", method: "PUT", path: "/db/a", body: `{}`, status: 201},
		{name: "b", method: "PUT", path: "/db/b", body: `{}`, status: 201},
		{name: "c", method: "PUT", path: "/db/c", body: `{}`, status: 201},
		{name: "other db", method: "PUT", path: "/other", status: 201},
		{name: "other doc", method: "PUT", path: "/other/x", body: `{}`, status: 201},
	})
	var info struct {
		UpdateSeq string `json:"update_seq"`
	}
	_, b := step{method: "GET", path: "/db"}.do(t, ts.URL)
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	db, err := srv.store.DB("db")
	if err != nil {
		t.Fatal(err)
	}
	dbUUID := db.UUID()
	decode := func(seq string) (uint64, string) {
		t.Helper()
		_, opaque, _ := strings.Cut(seq, "-")
		raw, err := base64.RawURLEncoding.DecodeString(opaque)
		if err != nil {
			t.Fatalf("%s: %v", seq, err)
		}
		v, err := decodeETF(raw)
		if err != nil {
			t.Fatalf("%s: %v", seq, err)
		}
		shards, _ := v.([]any)
		if len(shards) != 1 {
			t.Fatalf("%s: %#v, want one shard", seq, v)
		}
		sh, _ := shards[0].(etfTuple)
		if len(sh) != 3 || !sameTerm(sh[0], etfAtomValue(NodeName)) || !sameTerm(sh[1], []any{uint64(0), uint64(ringEnd)}) {
			t.Fatalf("%s: shard %#v", seq, sh)
		}
		s, _ := sh[2].(etfTuple)
		if len(s) != 3 || !sameTerm(s[2], etfAtomValue(NodeName)) {
			t.Fatalf("%s: seq %#v", seq, sh[2])
		}
		n, _ := s[0].(uint64)
		uuid, _ := s[1].([]byte)
		return n, string(uuid)
	}
	if n, uuid := decode(info.UpdateSeq); n != 3 || uuid != dbUUID[:7] || !strings.HasPrefix(info.UpdateSeq, "3-g1AAAA") {
		t.Errorf("update_seq %s: seq %d, uuid %s; db uuid %s", info.UpdateSeq, n, uuid, dbUUID)
	}
	type changes struct {
		Results []struct {
			Seq string `json:"seq"`
			ID  string `json:"id"`
		} `json:"results"`
		LastSeq string `json:"last_seq"`
	}
	read := func(path string) changes {
		t.Helper()
		var c changes
		_, b := step{method: "GET", path: path}.do(t, ts.URL)
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		return c
	}
	all := read("/db/_changes")
	if len(all.Results) != 3 || all.LastSeq != info.UpdateSeq {
		t.Fatalf("changes %+v, update_seq %s", all, info.UpdateSeq)
	}
	for i, r := range all.Results {
		if n, _ := decode(r.Seq); n != uint64(i+1) {
			t.Errorf("row %d: seq %s is %d", i, r.Seq, n)
		}
	}
	_, b = step{method: "GET", path: "/other"}.do(t, ts.URL)
	var other struct {
		UpdateSeq string `json:"update_seq"`
	}
	json.Unmarshal(b, &other)
	for _, tc := range []struct {
		name, since string
		ids         string
	}{
		{"its own", all.Results[0].Seq, "b c"},
		{"without the N-", strings.SplitN(all.Results[0].Seq, "-", 2)[1], "b c"},
		{"minicouch's earlier format", "1-g1" + dbUUID[:12], "b c"},
		{"a number", "2", "c"},
		{"now", "now", ""},
		{"another db's: from the start", other.UpdateSeq, "a b c"},
	} {
		c := read("/db/_changes?since=" + url.QueryEscape(tc.since))
		var ids []string
		for _, r := range c.Results {
			ids = append(ids, r.ID)
		}
		if strings.Join(ids, " ") != tc.ids {
			t.Errorf("since %s (%s): %v, want %s", tc.name, tc.since, ids, tc.ids)
		}
	}
	runSteps(t, ts.URL, []step{{name: "not a seq", method: "GET", path: "/db/_changes?since=g1AAAAgarbage", status: 400,
		want: `{"error":"bad_request","reason":"Malformed sequence supplied in 'since' parameter."}`}})
}
