package jobs

import (
	"errors"
	"fmt"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Record formats, for nodes of two versions sharing one queue during a
// rolling upgrade. A node never rewrites a record of a newer format than
// it writes (it would drop or misread what it does not know): it leaves
// it as it is, for a node of that version.
//
//   - Job rows carry RowFormat in their first byte. A row of a newer
//     format fails to decode with ErrNewerFormat, so every operation on
//     it fails and writes nothing. A version that changes the row layout
//     must therefore first be preceded by one that reads the new layout
//     (an expand, then a contract release), as rows are read by every
//     operation.
//   - Lease records: the identity (P,11) and heartbeat (P,13) tuples are
//     read tolerating elements a newer version appends, and an expiry
//     rewrites the identity with them. Their format and the job data
//     format the holder runs (LeaseOptions.Format) are in a key of their
//     own (P,17), which versions before it ignore. A lease of a newer
//     LeaseFormat is expired as any other (a dead node's jobs must move,
//     whatever its version), but its jobs are not adopted as they stand
//     from here: they are re-enqueued first, and a node of its version
//     takes them.
const (
	// RowFormat is the format of the job rows this version writes.
	RowFormat = 1
	// LeaseFormat is the format of the lease records this version writes.
	LeaseFormat = 1
)

// ErrNewerFormat: a record was written by a newer version in a format
// this one does not know; it is left as it is.
var ErrNewerFormat = errors.New("jobs: record written in a newer format")

// newerFormat is ErrNewerFormat for a record of format got, this version
// knowing up to known.
func newerFormat(what string, got, known int) error {
	return fmt.Errorf("%w: %s of format %d, this version knows up to %d", ErrNewerFormat, what, got, known)
}

// encodeLeaseVersion is a lease's version value: its record format and the
// job data format its holder runs.
func encodeLeaseVersion(dataFormat int) []byte {
	return pack(nil, int64(LeaseFormat), int64(dataFormat))
}

// decodeLeaseVersion reads a lease version value into info; a lease
// without one (granted by a version before lease formats) is of format 0.
func decodeLeaseVersion(v []byte, info *LeaseInfo) {
	var format, data int64
	if v != nil && decodeTupleHead(v, &format, &data) == nil {
		info.LeaseFormat, info.Format = int(format), int(data)
	}
}

// expiredValue returns the lease identity v marked expired, keeping what a
// newer version appended to it.
func expiredValue(id string, v []byte) []byte {
	el, err := unpack(v)
	if _, _, derr := decodeLease(id, v); err != nil || derr != nil {
		return encodeLease(LeaseInfo{ID: id}, true)
	}
	el[4] = int64(1)
	return pack(nil, el...)
}

// leaseVersionOf reads lease id's version in t (format 0 when it has none).
func (q *Queue) leaseVersionOf(t kv.ReadTx, id string) (LeaseInfo, error) {
	var info LeaseInfo
	v, err := t.Get(q.l.leaseVersion(id))
	if err == nil {
		decodeLeaseVersion(v, &info)
	}
	return info, err
}

// ownFormat keeps the leases of ids whose record format this version
// knows: the jobs of a newer version's lease are left to its nodes.
func (tx *Tx) ownFormat(ids []string) ([]string, error) {
	kept := ids[:0]
	for _, id := range ids {
		ver, err := tx.q.leaseVersionOf(tx.t, id)
		if err != nil {
			return nil, err
		}
		if ver.LeaseFormat <= LeaseFormat {
			kept = append(kept, id)
		}
	}
	return kept, nil
}
