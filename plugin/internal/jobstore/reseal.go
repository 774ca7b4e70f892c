package jobstore

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// resealBatch is how many records one Reseal transaction rewrites.
const resealBatch = 64

// Reseal seals again, with keys' current key, every job record whose
// endpoints are in plaintext (written before records were sealed), sealed
// without a binding (seal version s1) or sealed with another key keys
// holds. It returns how many records it
// rewrote and how many it could not open (sealed with a key keys does not
// hold), which it leaves as they are.
func Reseal(ctx context.Context, q *jobs.Queue, keys *seal.Keyring) (resealed, unreadable int, err error) {
	var stale []string
	err = q.Fold(ctx, jobdata.JobType, func(id string, _ jobs.State, data []byte) error {
		switch sealState(data, keys) {
		case sealStale:
			stale = append(stale, id)
		case sealUnknownKey:
			unreadable++
		}
		return nil
	})
	if err != nil {
		return 0, unreadable, err
	}
	for start := 0; start < len(stale); start += resealBatch {
		batch := stale[start:min(start+resealBatch, len(stale))]
		n := 0
		err := q.Transact(ctx, func(tx *jobs.Tx) error {
			n = 0
			for _, id := range batch {
				data, err := tx.GetData(jobdata.JobType, id)
				if errors.Is(err, jobs.ErrNotFound) {
					continue // removed meanwhile
				}
				if err != nil {
					return err
				}
				if sealState(data, keys) != sealStale {
					continue // rewritten meanwhile
				}
				rec, err := jobdata.Decode(data, keys, id)
				if err != nil {
					continue // damaged: left for the job server to report
				}
				if err := tx.SetData(jobdata.JobType, id, rec.Encode(keys, id)); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return resealed, unreadable, err
		}
		resealed += n
	}
	return resealed, unreadable, nil
}

// How a stored record's endpoints are kept, as sealState sees it.
const (
	sealCurrent    = iota // sealed with the current key, or no endpoints
	sealStale             // in plaintext, sealed without a binding (s1), or with a previous key
	sealUnknownKey        // sealed with a key the keyring does not hold
)

// sealState tells how record data keeps its endpoints, reading only its
// "rep" member's endpoint fields and opening nothing.
func sealState(data []byte, keys *seal.Keyring) int {
	if jobdata.FormatOf(data) > jobdata.Format {
		return sealCurrent // a newer version's: its nodes seal it
	}
	var probe struct {
		Rep *struct {
			Source json.RawMessage `json:"source"`
			Target json.RawMessage `json:"target"`
			Sealed string          `json:"sealed_endpoints"`
		} `json:"rep"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Rep == nil {
		return sealCurrent
	}
	if probe.Rep.Sealed == "" {
		if probe.Rep.Source != nil || probe.Rep.Target != nil {
			return sealStale
		}
		return sealCurrent
	}
	id, ok := seal.KeyID(probe.Rep.Sealed)
	switch {
	case !ok:
		return sealCurrent // damaged: nothing to do here
	case id == keys.ID() && !seal.Legacy(probe.Rep.Sealed):
		return sealCurrent
	case keys.Holds(id):
		return sealStale
	default:
		return sealUnknownKey
	}
}
