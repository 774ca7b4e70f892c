package jobdata

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/seal"
)

// secretRep is a replication with a distinct secret in every field that
// can hold one.
func secretRep() *parse.Rep {
	ep := func(side string) parse.Endpoint {
		return parse.Endpoint{
			URL:       "http://h/" + side + "/?token=QTOKEN-" + side,
			Auth:      &parse.BasicAuth{Username: "USER-" + side, Password: "PASSWORD-" + side},
			AuthOther: json.RawMessage(`{"session":{"cookie":"COOKIE-` + side + `"}}`),
			Headers:   map[string]string{"X-Token": "XTOKEN-" + side, "Cookie": "AuthSession=SESSION-" + side},
			Proxy:     "http://puser:PROXYPW-" + side + "@proxy:3128",
		}
	}
	return &parse.Rep{Source: ep("src"), Target: ep("tgt"), Continuous: true,
		UserCtx: parse.UserCtx{Name: "bob", Roles: []string{"r"}}, WorkerProcesses: 4}
}

// secrets are the strings secretRep hides.
var secrets = []string{"QTOKEN", "USER-", "PASSWORD", "COOKIE-", "XTOKEN", "SESSION-", "PROXYPW"}

// legacy encodes rec as versions before sealing stored it.
func legacy(t *testing.T, rec *Record) []byte {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeSealsEveryCredential(t *testing.T) {
	rep := secretRep()
	transient := New(rep, "", "", "", time.Unix(1, 0))
	persistent := New(rep, "db/_replicator", "u1", "doc", time.Unix(1, 0))
	persistent.RepID = "abc+continuous"
	for _, rec := range []*Record{transient, persistent} {
		data := rec.Encode(testKeys, "j")
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("stored record holds %s: %s", s, data)
			}
		}
		if got, want := string(legacy(t, rec)), "PASSWORD-src"; !strings.Contains(got, want) {
			t.Fatalf("the test's plaintext encoding lacks %s", want)
		}
		// What listing reads stays readable.
		if s, ok := Summarize(data); !ok || s != rec.Summary() {
			t.Errorf("Summarize = %+v, %v; want %+v", s, ok, rec.Summary())
		}
		if tag := ShareTag("", "", data); tag != rec.ShareKey() {
			t.Errorf("ShareTag = %q, want %q", tag, rec.ShareKey())
		}
		got, err := Decode(data, testKeys, "j")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Rep, rec.Rep) {
			t.Errorf("decoded rep %+v, want %+v", got.Rep, rec.Rep)
		}
		if got.DocID != rec.DocID || got.RepID != rec.RepID || got.State != rec.State {
			t.Errorf("decoded %+v, want %+v", got, rec)
		}
	}
	// A record without a replication (a doc that did not parse).
	failed := NewFailed("db/_replicator", "u", "bad", "reason", time.Unix(1, 0))
	got, err := Decode(failed.Encode(nil, "bad"), nil, "bad")
	if err != nil || got.Rep != nil || got.ErrorReason() != "reason" {
		t.Fatalf("failed record: %+v, %v", got, err)
	}
}

func TestDecode(t *testing.T) {
	rep := secretRep()
	rec := New(rep, "db/_replicator", "u1", "doc", time.Unix(1, 0))
	sealed := rec.Encode(testKeys, "j")
	other := seal.NewKeyring(seal.RandomKey())
	tampered := bytes.Replace(sealed, []byte(`"sealed_endpoints":"s2.`), []byte(`"sealed_endpoints":"s2.0`), 1)
	for _, tc := range []struct {
		name string
		data []byte
		keys *seal.Keyring
		err  error
	}{
		{"sealed", sealed, testKeys, nil},
		{"written before sealing", legacy(t, rec), nil, nil},
		{"another node's key", sealed, other, seal.ErrUnknownKey},
		{"no keyring", sealed, nil, ErrNoKeyring},
		{"relabelled", tampered, testKeys, seal.ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.data, tc.keys, "j")
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err != nil {
				if strings.Contains(err.Error(), "PASSWORD") {
					t.Errorf("error shows a secret: %v", err)
				}
				return
			}
			if !got.Rep.Equal(rep) || got.Rep.Source.Auth.Password != "PASSWORD-src" {
				t.Errorf("decoded rep %+v, want %+v", got.Rep, rep)
			}
		})
	}
}

// TestEncodeKeepsSealedValue: an unchanged record keeps its sealed value
// (a running job's updates do not seal again), a changed one or a key
// rotation seals again.
func TestEncodeKeepsSealedValue(t *testing.T) {
	oldKey, newKey := seal.RandomKey(), seal.RandomKey()
	keys := seal.NewKeyring(oldKey)
	sealedOf := func(data []byte) string {
		var v struct {
			Rep struct {
				Sealed string `json:"sealed_endpoints"`
			} `json:"rep"`
		}
		json.Unmarshal(data, &v)
		return v.Rep.Sealed
	}
	first := New(secretRep(), "db/_replicator", "u1", "doc", time.Unix(1, 0)).Encode(keys, "j")
	rec, err := Decode(first, keys, "j")
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Stats.DocsRead = Running, 10
	same := rec.Encode(keys, "j")
	if sealedOf(same) != sealedOf(first) {
		t.Error("an update that changed no endpoint sealed them again")
	}
	changed := *rec
	changed.Rep = rec.Rep.Clone()
	changed.Rep.Target.Auth.Password = "new password"
	if sealedOf(changed.Encode(keys, "j")) == sealedOf(first) {
		t.Error("a changed password kept the old sealed value")
	}
	rotated := seal.NewKeyring(newKey, oldKey)
	if id, _ := seal.KeyID(sealedOf(rec.Encode(rotated, "j"))); id != newKey.ID() {
		t.Errorf("after rotation sealed with %s, want %s", id, newKey.ID())
	}
}

// TestSealBindsJobAndRights (issue 38 item 7): a record's sealed
// endpoints open only in their own job's record, under the rights they
// were sealed with: copied to another job, or left under a user_ctx,
// owner, db or doc changed by whoever can write to the store without the
// key, they do not open, so no job runs with them.
func TestSealBindsJobAndRights(t *testing.T) {
	rep := secretRep()
	rep.Owner, rep.DB, rep.DocID = "bob", "db/_replicator", "doc"
	data := New(rep, "db/_replicator", "u1", "doc", time.Unix(1, 0)).Encode(testKeys, "job-bob")
	edit := func(old, new string) []byte {
		t.Helper()
		if !bytes.Contains(data, []byte(old)) {
			t.Fatalf("record lacks %s: %s", old, data)
		}
		return bytes.Replace(data, []byte(old), []byte(new), 1)
	}
	for _, tc := range []struct {
		name  string
		jobID string
		data  []byte
	}{
		{"copied to another job", "job-eve", data},
		{"user_ctx made admin's", "job-bob", edit(`"roles":["r"]`, `"roles":["r","_admin"]`)},
		{"user_ctx renamed", "job-bob", edit(`"name":"bob"`, `"name":"admin"`)},
		{"owner changed", "job-bob", edit(`"owner":"bob"`, `"owner":"eve"`)},
		{"rep db changed", "job-bob", edit(`"db":"db/_replicator"`, `"db":"other/_replicator"`)},
		{"rep doc changed", "job-bob", edit(`"doc_id":"doc","`, `"doc_id":"other","`)},
		{"record db changed", "job-bob", edit(`"db_name":"db/_replicator"`, `"db_name":"other/_replicator"`)},
		{"record db uuid changed", "job-bob", edit(`"db_uuid":"u1"`, `"db_uuid":"u2"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.data, testKeys, tc.jobID)
			if !errors.Is(err, seal.ErrBroken) {
				t.Fatalf("Decode = %+v, %v; want seal.ErrBroken", got, err)
			}
		})
	}
	if _, err := Decode(data, testKeys, "job-bob"); err != nil {
		t.Fatalf("the untouched record: %v", err)
	}
	if id := SealKeyID(data); id != testKeys.ID() {
		t.Errorf("SealKeyID = %q, want %q", id, testKeys.ID())
	}
}

// s1Seal seals plain with the key made of material as versions before
// bindings did: "s1.<key id>.…", the head alone authenticated.
func s1Seal(t *testing.T, material, plain []byte) string {
	t.Helper()
	k, err := seal.NewKey(material)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(material)
	aead, _ := cipher.NewGCMWithRandomNonce(block)
	head := "s1." + k.ID() + "."
	return head + base64.RawURLEncoding.EncodeToString(aead.Seal(nil, nil, plain, []byte(head)))
}

// TestDecodeS1 (issue 38 item 7): records sealed before bindings (s1)
// still open after the upgrade, and their next write seals them bound
// (s2), even when nothing else changed; once the keyring closes the
// legacy formats, s1 and plaintext records no longer open.
func TestDecodeS1(t *testing.T) {
	material := bytes.Repeat([]byte{9}, seal.KeySize)
	k, _ := seal.NewKey(material)
	keys := seal.NewKeyring(k)
	rep := secretRep()
	rec := New(rep, "db/_replicator", "u1", "doc", time.Unix(1, 0))
	plain, err := json.Marshal(endpoints{rep.Source, rep.Target})
	if err != nil {
		t.Fatal(err)
	}
	s1 := s1Seal(t, material, plain)
	enc := rec.Encode(keys, "j")
	data := bytes.Replace(enc, []byte(sealedOfRecord(t, enc)), []byte(s1), 1)
	if !strings.Contains(string(data), `"sealed_endpoints":"s1.`) {
		t.Fatalf("not an s1 record: %s", data)
	}
	got, err := Decode(data, keys, "j")
	if err != nil || !got.Rep.Equal(rep) {
		t.Fatalf("s1 record: %+v, %v", got, err)
	}
	again := sealedOfRecord(t, got.Encode(keys, "j"))
	if !strings.HasPrefix(again, "s2.") {
		t.Fatalf("rewritten as %s, want s2", again)
	}
	if back, err := Decode(got.Encode(keys, "j"), keys, "j"); err != nil || !back.Rep.Equal(rep) {
		t.Fatalf("rewritten record: %+v, %v", back, err)
	}
	// Once every record was sealed again, an s1 or plaintext record was
	// put there by someone without the key: refused.
	keys.CloseLegacy()
	if got, err := Decode(data, keys, "j"); !errors.Is(err, seal.ErrLegacy) || !errors.Is(err, seal.ErrBroken) {
		t.Errorf("s1 record after CloseLegacy: %+v, %v", got, err)
	}
	if got, err := Decode(legacy(t, rec), keys, "j"); !errors.Is(err, ErrPlaintext) || !errors.Is(err, seal.ErrBroken) {
		t.Errorf("plaintext record after CloseLegacy: %+v, %v", got, err)
	}
	if _, err := Decode(got.Encode(keys, "j"), keys, "j"); err != nil {
		t.Errorf("s2 record after CloseLegacy: %v", err)
	}
}

// sealedOfRecord returns the sealed endpoints of encoded record data.
func sealedOfRecord(t *testing.T, data []byte) string {
	t.Helper()
	var v struct {
		Rep struct {
			Sealed string `json:"sealed_endpoints"`
		} `json:"rep"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v.Rep.Sealed
}
