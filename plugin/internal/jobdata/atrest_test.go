package jobdata

import (
	"bytes"
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
		data := rec.Encode(testKeys)
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
		got, err := Decode(data, testKeys)
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
	got, err := Decode(failed.Encode(nil), nil)
	if err != nil || got.Rep != nil || got.ErrorReason() != "reason" {
		t.Fatalf("failed record: %+v, %v", got, err)
	}
}

func TestDecode(t *testing.T) {
	rep := secretRep()
	rec := New(rep, "db/_replicator", "u1", "doc", time.Unix(1, 0))
	sealed := rec.Encode(testKeys)
	other := seal.NewKeyring(seal.RandomKey())
	tampered := bytes.Replace(sealed, []byte(`"sealed_endpoints":"s1.`), []byte(`"sealed_endpoints":"s1.0`), 1)
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
			got, err := Decode(tc.data, tc.keys)
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
	first := New(secretRep(), "db/_replicator", "u1", "doc", time.Unix(1, 0)).Encode(keys)
	rec, err := Decode(first, keys)
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Stats.DocsRead = Running, 10
	same := rec.Encode(keys)
	if sealedOf(same) != sealedOf(first) {
		t.Error("an update that changed no endpoint sealed them again")
	}
	changed := *rec
	changed.Rep = rec.Rep.Clone()
	changed.Rep.Target.Auth.Password = "new password"
	if sealedOf(changed.Encode(keys)) == sealedOf(first) {
		t.Error("a changed password kept the old sealed value")
	}
	rotated := seal.NewKeyring(newKey, oldKey)
	if id, _ := seal.KeyID(sealedOf(rec.Encode(rotated))); id != newKey.ID() {
		t.Errorf("after rotation sealed with %s, want %s", id, newKey.ID())
	}
}
