package jobdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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
//	{"rep":{"continuous":true,…,"user_ctx":…,"sealed_endpoints":"s2.<key id>.<…>"},"state":…}
//
// The sealed value is bound (seal.Keyring.Seal) to the record's job id and
// to every field that decides what the job may do or whose it is (binding):
// a sealed value copied to another job's record, or left under a changed
// user_ctx, owner, db or doc id, does not open. Whoever can write to the
// store without the key therefore cannot hand a job's credentials to
// another job, nor turn a user's job into an admin's.
//
// Older formats, read for the upgrade and rewritten in this one on the
// record's next write (and by jobstore.Reseal when the plugin starts):
// "s1." values (sealed without a binding) and records written before
// sealing, which hold "source" and "target" in plaintext inside "rep".

// ErrNoKeyring is returned by Decode for a record with sealed endpoints
// when it is given no keyring.
var ErrNoKeyring = errors.New("jobdata: no keyring to open the record's sealed endpoints")

// ErrPlaintext is returned by Decode for a record with endpoints in
// plaintext once keys refuse older formats (seal.Keyring.CloseLegacy):
// every record was sealed since, so someone without the key wrote it.
var ErrPlaintext = fmt.Errorf("jobdata: endpoints in plaintext: %w", seal.ErrLegacy)

// endpoints is the sealed part of a record.
type endpoints struct {
	Source parse.Endpoint `json:"source"`
	Target parse.Endpoint `json:"target"`
}

// atRest is a Record as the queue stores it: its Rep field is replaced by
// repAtRest (a field of the outer struct wins over the embedded one of
// the same JSON name).
type atRest struct {
	Format int `json:"format"` // first, for FormatOf
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

// Encode serialises the record of job jobID for the jobs queue, its
// endpoints sealed with keys' current key and bound to jobID and the
// record's rights (binding). When the endpoints and binding are the ones
// Decode opened and that key sealed them, the sealed value is kept, so
// that a running job's frequent updates do not seal again. keys must not
// be nil.
func (r *Record) Encode(keys *seal.Keyring, jobID string) []byte {
	if r.partial {
		panic("jobdata: a partial record (of a newer format) is never written back")
	}
	at := atRest{Format: Format, Record: r}
	if r.Rep != nil {
		if keys == nil {
			panic("jobdata: Encode without a keyring would store credentials in plaintext")
		}
		at.Rep = &repAtRest{Rep: r.Rep, Sealed: r.sealEndpoints(keys, jobID)}
	}
	b, err := json.Marshal(at)
	if err != nil {
		// Every field is a plain value or validated JSON: this cannot fail.
		panic("jobdata: encode: " + err.Error())
	}
	return b
}

// sealEndpoints returns the record's endpoints sealed with keys' current
// key and bound to job jobID, re-using the value Decode opened when
// nothing changed.
func (r *Record) sealEndpoints(keys *seal.Keyring, jobID string) string {
	plain, err := json.Marshal(endpoints{r.Rep.Source, r.Rep.Target})
	if err != nil {
		panic("jobdata: encode endpoints: " + err.Error())
	}
	binding := r.binding(jobID)
	if r.sealed != "" && !seal.Legacy(r.sealed) && bytes.Equal(plain, r.opened) && bytes.Equal(binding, r.bound) {
		if id, _ := seal.KeyID(r.sealed); id == keys.ID() {
			return r.sealed
		}
	}
	return keys.Seal(plain, binding)
}

// binding is what the sealed endpoints of job jobID's record are bound
// to: the job's id and every field that grants rights or says whose the
// job is (who it runs as: user_ctx, which decides whether the host policy
// applies; the doc's owner; the replicator db and doc whose state it
// writes). Each is quoted, so that no value can run into the next.
func (r *Record) binding(jobID string) []byte {
	var b []byte
	add := func(s string) { b = append(strconv.AppendQuote(b, s), ',') }
	add("couchepi job record v2")
	add(jobID)
	add(r.DBName)
	add(r.DBUUID)
	add(r.DocID)
	add(r.Rep.Owner)
	add(r.Rep.DB)
	add(r.Rep.DocID)
	add(r.Rep.UserCtx.Name)
	for _, role := range r.Rep.UserCtx.Roles {
		add(role)
	}
	return b
}

// Decode parses the stored data of job jobID, opening its sealed endpoints
// with keys. A record whose endpoints cannot be opened fails with an error
// wrapping seal.ErrUnknownKey (sealed with a key keys does not hold),
// seal.ErrBroken (damaged, or changed: copied from another job, another
// user_ctx…) or ErrNoKeyring; records written before sealing decode
// without keys; a record of a newer format than Format fails with a
// *NewerFormatError, whatever else it holds. Its errors never name keys (see seal.Keyring.Open).
func Decode(data []byte, keys *seal.Keyring, jobID string) (*Record, error) {
	if err := checkFormat(data); err != nil {
		return nil, err
	}
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
		if keys != nil && keys.LegacyClosed() && (at.Rep.Source != nil || at.Rep.Target != nil) {
			return nil, ErrPlaintext
		}
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
	binding := r.binding(jobID)
	plain, _, err := keys.Open(at.Rep.Sealed, binding)
	if err != nil {
		return nil, fmt.Errorf("jobdata: endpoints: %w", err)
	}
	var e endpoints
	if err := json.Unmarshal(plain, &e); err != nil {
		return nil, fmt.Errorf("jobdata: endpoints: %w", err)
	}
	r.Rep.Source, r.Rep.Target = e.Source, e.Target
	r.sealed, r.opened, r.bound = at.Rep.Sealed, plain, binding
	return &r, nil
}

// SealKeyID returns the id of the key that sealed the endpoints of
// stored record data, "" when they are not sealed, for operators' logs:
// errors never name keys (see seal.Keyring.Open).
func SealKeyID(data []byte) string {
	var probe struct {
		Rep *struct {
			Sealed string `json:"sealed_endpoints"`
		} `json:"rep"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Rep == nil {
		return ""
	}
	id, _ := seal.KeyID(probe.Rep.Sealed)
	return id
}
