package jobdata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
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

// TestReseal: records written before sealing, and records sealed with a
// previous key, are sealed with the current key in place, whatever their
// state; a runner keeps its job; records sealed with an unknown key are
// counted and left alone.
func TestReseal(t *testing.T) {
	ctx := context.Background()
	q, _ := testQueue(t)
	oldKey, newKey := seal.RandomKey(), seal.RandomKey()
	oldKeys, keys := seal.NewKeyring(oldKey), seal.NewKeyring(newKey, oldKey)
	stranger := seal.NewKeyring(seal.RandomKey())
	rec := func(doc string) *Record { return New(secretRep(), "db/_replicator", "u1", doc, time.Unix(1, 0)) }
	add := func(id string, data []byte) {
		if err := q.Add(ctx, JobType, id, data, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	add("running", legacy(t, rec("running")))
	runner, err := q.Accept(ctx, JobType, jobs.AcceptOptions{NoWait: true})
	if err != nil || runner.ID != "running" {
		t.Fatalf("accept: %v %+v", err, runner)
	}
	add("plain", legacy(t, rec("plain")))
	add("old-key", rec("old-key").Encode(oldKeys))
	add("current", rec("current").Encode(keys))
	add("stranger", rec("stranger").Encode(stranger))
	add("failed", NewFailed("db/_replicator", "u1", "failed", "bad doc", time.Unix(1, 0)).Encode(nil))
	before := map[string][]byte{}
	for _, id := range []string{"current", "stranger", "failed"} {
		before[id], _ = q.GetData(ctx, JobType, id)
	}

	resealed, unreadable, err := Reseal(ctx, q, keys)
	if err != nil || resealed != 3 || unreadable != 1 {
		t.Fatalf("Reseal = %d resealed, %d unreadable, %v; want 3, 1", resealed, unreadable, err)
	}
	for _, id := range []string{"running", "plain", "old-key"} {
		data, _ := q.GetData(ctx, JobType, id)
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s still holds %s", id, s)
			}
		}
		if sealState(data, seal.NewKeyring(newKey)) != sealCurrent {
			t.Errorf("%s is not sealed with the current key: %s", id, data)
		}
		got, err := Decode(data, seal.NewKeyring(newKey))
		if err != nil || !got.Rep.Equal(secretRep()) || got.DocID != id {
			t.Errorf("%s after Reseal: %+v, %v", id, got, err)
		}
	}
	for id, data := range before {
		if now, _ := q.GetData(ctx, JobType, id); !bytes.Equal(now, data) {
			t.Errorf("%s was rewritten", id)
		}
	}
	if err := q.Update(ctx, runner, nil); err != nil {
		t.Errorf("the runner lost its job: %v", err)
	}
	if resealed, unreadable, err := Reseal(ctx, q, keys); resealed != 0 || unreadable != 1 || err != nil {
		t.Errorf("second Reseal = %d, %d, %v; want 0, 1", resealed, unreadable, err)
	}
}

// TestGetManySkipsUnreadable: a record sealed with a key this node lacks
// reads as nil in GetMany (as Fold skips it), and hides no other record.
func TestGetManySkipsUnreadable(t *testing.T) {
	ctx := context.Background()
	q, rep := testQueue(t)
	other := seal.NewKeyring(seal.RandomKey())
	for id, keys := range map[string]*seal.Keyring{"mine": testKeys, "theirs": other} {
		if err := q.Add(ctx, JobType, id, New(rep, "", "", "", time.Unix(1, 0)).Encode(keys), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Records{Q: q, Keys: testKeys}.GetMany(ctx, []string{"theirs", "mine", "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != nil || got[1] == nil || got[1].Rep.Source.URL != "http://h/a/" || got[2] != nil {
		t.Fatalf("GetMany = %+v", got)
	}
}
