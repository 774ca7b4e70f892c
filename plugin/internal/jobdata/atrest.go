package jobdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/seal"
)

// A record is stored with its replication's endpoints sealed (package
// seal): the endpoints carry every credential of a replication (URL,
// basic auth, other auth settings, headers such as Authorization, Cookie
// or X-Token, proxy URLs), so the job queue, its store's history and its
// files never hold one in plaintext. The rest of the record stays
// readable, so that listing jobs (Summarize, StateOf, ShareTag) opens
// nothing:
//
//	{"rep":{"continuous":true,…,"user_ctx":…,"sealed_endpoints":"s1.<key id>.<…>"},"state":…}
//
// Records written before sealing hold "source" and "target" in plaintext
// inside "rep"; Decode reads them, and Encode seals them.

// ErrNoKeyring is returned by Decode for a record with sealed endpoints
// when it is given no keyring.
var ErrNoKeyring = errors.New("jobdata: no keyring to open the record's sealed endpoints")

// endpoints is the sealed part of a record.
type endpoints struct {
	Source parse.Endpoint `json:"source"`
	Target parse.Endpoint `json:"target"`
}

// atRest is a Record as the queue stores it: its Rep field is replaced by
// repAtRest (a field of the outer struct wins over the embedded one of
// the same JSON name).
type atRest struct {
	*Record
	Rep *repAtRest `json:"rep"`
}

// repAtRest is a Rep whose endpoints are sealed; Source and Target are
// only set in records written before sealing.
type repAtRest struct {
	*parse.Rep
	Source *parse.Endpoint `json:"source,omitempty"`
	Target *parse.Endpoint `json:"target,omitempty"`
	Sealed string          `json:"sealed_endpoints,omitempty"`
}

// Encode serialises the record for the jobs queue, its endpoints sealed
// with keys' current key. When the endpoints are the ones Decode opened
// and that key sealed them, the sealed value is kept, so that a running
// job's frequent updates do not seal again. keys must not be nil.
func (r *Record) Encode(keys *seal.Keyring) []byte {
	at := atRest{Record: r}
	if r.Rep != nil {
		if keys == nil {
			panic("jobdata: Encode without a keyring would store credentials in plaintext")
		}
		at.Rep = &repAtRest{Rep: r.Rep, Sealed: r.sealEndpoints(keys)}
	}
	b, err := json.Marshal(at)
	if err != nil {
		// Every field is a plain value or validated JSON: this cannot fail.
		panic("jobdata: encode: " + err.Error())
	}
	return b
}

// sealEndpoints returns the record's endpoints sealed with keys' current
// key, re-using the value Decode opened when nothing changed.
func (r *Record) sealEndpoints(keys *seal.Keyring) string {
	plain, err := json.Marshal(endpoints{r.Rep.Source, r.Rep.Target})
	if err != nil {
		panic("jobdata: encode endpoints: " + err.Error())
	}
	if r.sealed != "" && bytes.Equal(plain, r.opened) {
		if id, _ := seal.KeyID(r.sealed); id == keys.ID() {
			return r.sealed
		}
	}
	return keys.Seal(plain)
}

// Decode parses stored job data, opening its sealed endpoints with keys.
// A record whose endpoints cannot be opened fails with an error wrapping
// seal.ErrUnknownKey (sealed with a key keys does not hold), seal.ErrBroken
// or ErrNoKeyring; records written before sealing decode without keys.
func Decode(data []byte, keys *seal.Keyring) (*Record, error) {
	var r Record
	at := atRest{Record: &r, Rep: &repAtRest{Rep: &parse.Rep{}}}
	if err := json.Unmarshal(data, &at); err != nil {
		return nil, err
	}
	if at.Rep == nil { // "rep": null (a doc that did not parse)
		return &r, nil
	}
	r.Rep = at.Rep.Rep
	if at.Rep.Sealed == "" { // written before sealing
		if at.Rep.Source != nil {
			r.Rep.Source = *at.Rep.Source
		}
		if at.Rep.Target != nil {
			r.Rep.Target = *at.Rep.Target
		}
		return &r, nil
	}
	if keys == nil {
		return nil, ErrNoKeyring
	}
	plain, _, err := keys.Open(at.Rep.Sealed)
	if err != nil {
		return nil, fmt.Errorf("jobdata: endpoints: %w", err)
	}
	var e endpoints
	if err := json.Unmarshal(plain, &e); err != nil {
		return nil, fmt.Errorf("jobdata: endpoints: %w", err)
	}
	r.Rep.Source, r.Rep.Target = e.Source, e.Target
	r.sealed, r.opened = at.Rep.Sealed, plain
	return &r, nil
}

// sealedWith is the id of the key the record's endpoints were sealed
// with when it was decoded: "" for a record written before sealing (or
// not decoded).
func (r *Record) sealedWith() string {
	id, _ := seal.KeyID(r.sealed)
	return id
}
