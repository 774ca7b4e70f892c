package jobstore

import (
	"fmt"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// GrowthRoom is how much a record may grow after its job is added: a
// running job adds history events, errors, stats and, once a one-shot
// completes, its final checkpoint history (up to 50 sessions).
const GrowthRoom = 128 << 10

// MaxNewSize is the largest encoded record a job may be added with: the
// queue holds at most jobs.MaxDataSize per job, less GrowthRoom so that
// every later update of the record fits too.
const MaxNewSize = jobs.MaxDataSize - GrowthRoom

// TooLargeReason is why a replication whose record would be size bytes
// cannot become a job: a `_replicator` doc is refused with it at write
// time, a `_replicate` body answered with it, and a doc that got past
// write time anyway becomes a failed job with it.
func TooLargeReason(size int) string {
	return fmt.Sprintf("Replication too large for the job queue: its job would be %d bytes, over the limit of %d bytes; "+
		"use fewer `doc_ids` or a smaller `selector` or `query_params`", size, MaxNewSize)
}

// EncodeNew encodes rec, sealed with keys, for adding it as job jobID;
// ok is false when it is larger than MaxNewSize.
func EncodeNew(rec *jobdata.Record, keys *seal.Keyring, jobID string) (data []byte, ok bool) {
	data = rec.Encode(keys, jobID)
	return data, len(data) <= MaxNewSize
}

// SizingKeys returns a keyring to seal records that are only measured,
// where the real keys are not at hand (a doc checked before the plugin
// has started): every key seals a value to the same length, so a record
// sealed with these is as long as the one stored.
func SizingKeys() *seal.Keyring { return seal.NewKeyring(seal.RandomKey()) }
