package jobstore

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
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
func legacy(t *testing.T, rec *jobdata.Record) []byte {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// s1Record returns rec as job id's record with its endpoints sealed as
// versions before bindings did (s1), with the key made of material.
func s1Record(t *testing.T, rec *jobdata.Record, id string, material []byte) []byte {
	t.Helper()
	k, _ := seal.NewKey(material)
	plain, err := json.Marshal(struct {
		Source parse.Endpoint `json:"source"`
		Target parse.Endpoint `json:"target"`
	}{rec.Rep.Source, rec.Rep.Target})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(material)
	aead, _ := cipher.NewGCMWithRandomNonce(block)
	head := "s1." + k.ID() + "."
	s1 := head + base64.RawURLEncoding.EncodeToString(aead.Seal(nil, nil, plain, []byte(head)))
	data := rec.Encode(seal.NewKeyring(k), id)
	var v struct {
		Rep struct {
			Sealed string `json:"sealed_endpoints"`
		} `json:"rep"`
	}
	json.Unmarshal(data, &v)
	return bytes.Replace(data, []byte(v.Rep.Sealed), []byte(s1), 1)
}

// TestReseal: records written before sealing, sealed without a binding
// (s1, issue 38 item 7) or sealed with a previous key, are sealed with the
// current key in place, whatever their state; a runner keeps its job; records sealed with an unknown key are
// counted and left alone.
func TestReseal(t *testing.T) {
	ctx := context.Background()
	q, _ := testQueue(t)
	material := bytes.Repeat([]byte{5}, seal.KeySize)
	oldKey := seal.RandomKey()
	newKey, _ := seal.NewKey(material)
	oldKeys, keys := seal.NewKeyring(oldKey), seal.NewKeyring(newKey, oldKey)
	stranger := seal.NewKeyring(seal.RandomKey())
	rec := func(doc string) *jobdata.Record {
		return jobdata.New(secretRep(), "db/_replicator", "u1", doc, time.Unix(1, 0))
	}
	add := func(id string, data []byte) {
		if err := q.Add(ctx, jobdata.JobType, id, data, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	add("running", legacy(t, rec("running")))
	runner, err := q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{NoWait: true})
	if err != nil || runner.ID != "running" {
		t.Fatalf("accept: %v %+v", err, runner)
	}
	add("plain", legacy(t, rec("plain")))
	add("old-key", rec("old-key").Encode(oldKeys, "old-key"))
	add("current", rec("current").Encode(keys, "current"))
	add("s1", s1Record(t, rec("s1"), "s1", material))
	add("stranger", rec("stranger").Encode(stranger, "stranger"))
	add("failed", jobdata.NewFailed("db/_replicator", "u1", "failed", "bad doc", time.Unix(1, 0)).Encode(nil, "failed"))
	before := map[string][]byte{}
	for _, id := range []string{"current", "stranger", "failed"} {
		before[id], _ = q.GetData(ctx, jobdata.JobType, id)
	}

	resealed, unreadable, err := Reseal(ctx, q, keys)
	if err != nil || resealed != 4 || unreadable != 1 {
		t.Fatalf("Reseal = %d resealed, %d unreadable, %v; want 4, 1", resealed, unreadable, err)
	}
	for _, id := range []string{"running", "plain", "old-key", "s1"} {
		data, _ := q.GetData(ctx, jobdata.JobType, id)
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s still holds %s", id, s)
			}
		}
		if sealState(data, seal.NewKeyring(newKey)) != sealCurrent {
			t.Errorf("%s is not sealed with the current key: %s", id, data)
		}
		got, err := jobdata.Decode(data, seal.NewKeyring(newKey), id)
		if err != nil || !got.Rep.Equal(secretRep()) || got.DocID != id {
			t.Errorf("%s after Reseal: %+v, %v", id, got, err)
		}
	}
	for id, data := range before {
		if now, _ := q.GetData(ctx, jobdata.JobType, id); !bytes.Equal(now, data) {
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
		if err := q.Add(ctx, jobdata.JobType, id, jobdata.New(rep, "", "", "", time.Unix(1, 0)).Encode(keys, id), time.Time{}); err != nil {
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
