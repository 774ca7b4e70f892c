package jobs

import (
	"encoding/binary"
	"fmt"

	"github.com/couchepi/couchepi/plugin/kv"
)

// Key layout under the queue prefix P (after couch_jobs' FoundationDB layout):
//
//	P,1,Type,JobID        job row: state, resubmit, stime, lock, seq, data length, first data chunk
//	P,2,Type,STime,JobID  tag entry or ''         pending queue ordered by stime (ms since epoch); value: packed tag when indexed by tag
//	P,3,Type              8 random bytes          rewritten on every enqueue (once an int64 LE counter); watched by acceptors
//	P,4,Type              versionstamp            set by every transaction touching the type; watched by notifiers
//	P,5,Type              int64 timeout (ms)      activity timeout; its presence means the type exists
//	P,6,Type,VS,JobID     ''                      activity index of running jobs (VS = last update)
//	P,7,Type,JobID,N      data chunk N ≥ 1        job data beyond the first chunk
//	P,8                   monitor lease           holder id and expiry (one process runs the activity monitor)
//	P,9,Type,VS,N         JobID, state, time      transition log read by notifiers, trimmed by the monitor
//	P,10,Type,Tag,STime,JobID ''                  pending queue grouped by tag (Options.Tag), for AcceptOptions.Choose
//	P,11,LeaseID          lease identity          node, host, pid, ttl (ms), state (alive or expired); see lease.go
//	P,12,LeaseID,Type,JobID ''                    the running jobs held under a lease
//	P,13,LeaseID          lease heartbeat         renewal counter, running jobs, capacity
//	P,14,Type,JobID       LeaseID                 the lease a running job is held under (absent: held by activity, P,6)
//	P,15,LeaseID,Type,JobID lock                  jobs taken from a lease's holder (removed, held), read by its next renewal
//	P,16,LeaseID          int64 LE counter        bumped with every job taken from the lease; watched by its holder (hold.go)
//	P,17,LeaseID          lease version           lease record format, job data format its holder runs (version.go)
//
// Values that are tuples are read tolerating elements a newer version
// appends (decodeTupleHead), and rewritten with them (version.go): a
// version may add a field to a tuple value without a format bump.
const (
	spaceJob       = 1
	spacePending   = 2
	spaceCounter   = 3
	spaceWatermark = 4
	spaceTimeout   = 5
	spaceActivity  = 6
	spaceChunk     = 7
	spaceMonitor   = 8
	spaceLog       = 9
	spaceTagged    = 10
	spaceLease     = 11
	spaceLeaseJobs = 12
	spaceHeartbeat = 13
	spaceHolder    = 14
	spaceHalted    = 15
	spaceHaltSig   = 16
	spaceLeaseVer  = 17
)

type layout struct{ prefix []byte }

func (l layout) key(elems ...any) []byte {
	return pack(append([]byte(nil), l.prefix...), elems...)
}

func (l layout) job(typ, id string) []byte { return l.key(spaceJob, typ, id) }
func (l layout) jobs(typ string) []byte    { return l.key(spaceJob, typ) }
func (l layout) pending(typ string, stime int64, id string) []byte {
	return l.key(spacePending, typ, stime, id)
}
func (l layout) pendingType(typ string) []byte            { return l.key(spacePending, typ) }
func (l layout) pendingAt(typ string, stime int64) []byte { return l.key(spacePending, typ, stime) }
func (l layout) counter(typ string) []byte                { return l.key(spaceCounter, typ) }
func (l layout) watermark(typ string) []byte              { return l.key(spaceWatermark, typ) }
func (l layout) timeout(typ string) []byte                { return l.key(spaceTimeout, typ) }
func (l layout) timeouts() []byte                         { return l.key(spaceTimeout) }
func (l layout) activityType(typ string) []byte           { return l.key(spaceActivity, typ) }
func (l layout) activityAt(typ string, vs kv.Versionstamp) []byte {
	return l.key(spaceActivity, typ, vsElem(vs))
}
func (l layout) activity(typ string, vs kv.Versionstamp, id string) []byte {
	return l.key(spaceActivity, typ, vsElem(vs), id)
}
func (l layout) chunk(typ, id string, n int) []byte { return l.key(spaceChunk, typ, id, n) }
func (l layout) chunks(typ, id string) []byte       { return l.key(spaceChunk, typ, id) }
func (l layout) tagged(typ, tag string, stime int64, id string) []byte {
	return l.key(spaceTagged, typ, tag, stime, id)
}
func (l layout) taggedType(typ string) []byte     { return l.key(spaceTagged, typ) }
func (l layout) taggedTag(typ, tag string) []byte { return l.key(spaceTagged, typ, tag) }
func (l layout) monitorLease() []byte             { return l.key(spaceMonitor) }
func (l layout) leases() []byte                   { return l.key(spaceLease) }
func (l layout) lease(id string) []byte           { return l.key(spaceLease, id) }
func (l layout) heartbeats() []byte               { return l.key(spaceHeartbeat) }
func (l layout) heartbeat(id string) []byte       { return l.key(spaceHeartbeat, id) }
func (l layout) leaseJobs(id string) []byte       { return l.key(spaceLeaseJobs, id) }
func (l layout) leaseJob(id, typ, job string) []byte {
	return l.key(spaceLeaseJobs, id, typ, job)
}
func (l layout) holder(typ, job string) []byte { return l.key(spaceHolder, typ, job) }
func (l layout) halted(id string) []byte       { return l.key(spaceHalted, id) }
func (l layout) haltedJob(id, typ, job string) []byte {
	return l.key(spaceHalted, id, typ, job)
}
func (l layout) haltSignal(id string) []byte { return l.key(spaceHaltSig, id) }
func (l layout) leaseVersions() []byte       { return l.key(spaceLeaseVer) }
func (l layout) leaseVersion(id string) []byte {
	return l.key(spaceLeaseVer, id)
}
func (l layout) logType(typ string) []byte { return l.key(spaceLog, typ) }
func (l layout) logAt(typ string, vs kv.Versionstamp) []byte {
	return l.key(spaceLog, typ, vsElem(vs))
}
func (l layout) log(typ string, vs kv.Versionstamp, n int) []byte {
	return l.key(spaceLog, typ, vsElem(vs), n)
}

// Row states stored in a job row.
const (
	rowPending  = 0
	rowRunning  = 1
	rowFinished = 2
)

// ChunkSize is the largest job data value stored under one key; data beyond
// it is split across chunk keys (FoundationDB values are limited to 100 KB).
const ChunkSize = 90 * 1024

// MaxDataSize bounds the data of one job; larger data fails with
// ErrDataTooLarge, keeping every transaction far below FoundationDB's 10 MB.
const MaxDataSize = 1 << 20

// row is a decoded job row. Layout of the value:
// [0] format (RowFormat), [1] state, [2] resubmit, [3:11] stime, [11:27] lock,
// [27:37] seq versionstamp, [37:41] total data length, [41:] first chunk.
type row struct {
	state    byte
	resubmit bool
	stime    int64
	lock     [16]byte
	seq      kv.Versionstamp
	total    int
	inline   []byte
}

const rowHeader = 41

func (r *row) encode() []byte {
	b := make([]byte, rowHeader, rowHeader+len(r.inline))
	b[0] = RowFormat
	b[1] = r.state
	if r.resubmit {
		b[2] = 1
	}
	binary.BigEndian.PutUint64(b[3:11], uint64(r.stime))
	copy(b[11:27], r.lock[:])
	copy(b[27:37], r.seq[:])
	binary.BigEndian.PutUint32(b[37:41], uint32(r.total))
	return append(b, r.inline...)
}

func decodeRow(b []byte) (*row, error) {
	if len(b) > 0 && b[0] > RowFormat {
		return nil, newerFormat("job row", int(b[0]), RowFormat)
	}
	if len(b) < rowHeader || b[0] != RowFormat {
		return nil, fmt.Errorf("jobs: malformed job row (%d bytes)", len(b))
	}
	r := &row{state: b[1], resubmit: b[2] == 1, stime: int64(binary.BigEndian.Uint64(b[3:11]))}
	copy(r.lock[:], b[11:27])
	copy(r.seq[:], b[27:37])
	r.total = int(binary.BigEndian.Uint32(b[37:41]))
	r.inline = append([]byte(nil), b[rowHeader:]...)
	return r, nil
}

func (r *row) State() State {
	switch r.state {
	case rowPending:
		return Pending
	case rowRunning:
		return Running
	default:
		return Finished
	}
}

func putInt64(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

func getInt64(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}
