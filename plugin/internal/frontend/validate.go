package frontend

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
)

// BeforeDocUpdate applies CouchDB's write-time rules to a replication doc
// of db (parse.BeforeDocUpdateHosts: owner handling, then parsing without
// network, then the host policy of opts, whose LocalURL is the server's),
// and refuses a doc whose job would be too large for the job queue
// (jobstore.MaxNewSize), computed as the frontend computes the job of the
// stored doc, with opts as the `[replicator]` defaults. The replicator's
// own writes (role `_replicator`) pass unchanged; a doc that is refused
// gets 403 forbidden and the reason. It needs no state, so it is served
// before the plugin has started.
//
// current returns the doc's current winning revision (nil, nil when there
// is none); it is called only for writers who are not admins, so that they
// can only replace docs they own, whatever `owner` or `_rev` they send and
// with new_edits=false too.
func BeforeDocUpdate(db string, doc []byte, user hooks.UserCtx, opts parse.Options, current func(id string) ([]byte, error)) ([]byte, error) {
	out, err := parse.BeforeDocUpdateHosts(doc, user, opts)
	if err == nil && current != nil && !user.IsAdmin() && !user.IsReplicator() {
		if id := docID(doc); id != "" && !strings.HasPrefix(id, "_design/") && !strings.HasPrefix(id, "_local/") {
			cur, cerr := current(id)
			if cerr != nil {
				return nil, cerr
			}
			err = parse.CheckOwner(cur, user)
		}
	}
	if err == nil && !user.IsReplicator() {
		err = checkJobSize(db, out, opts)
	}
	if err != nil {
		var pe *parse.Error
		if errors.As(err, &pe) {
			return nil, hooks.Forbidden(pe.Reason)
		}
		return nil, hooks.Forbidden(err.Error())
	}
	return out, nil
}

// checkJobSize returns a *parse.Error when doc, about to be stored in db,
// would become a job whose record is larger than a job may be added with.
// The record is the one docRecord makes of the stored doc (the db's uuid
// aside, which has a fixed length), so the check cannot drift from what
// the frontend stores; it is built only for docs large enough to come
// near the limit (mayOutgrow), so that the usual small doc is not parsed
// twice.
func checkJobSize(db string, doc []byte, opts parse.Options) error {
	if !mayOutgrow(db, doc, opts) {
		return nil
	}
	ms, err := jsonobj.Parse(doc)
	if err != nil {
		return nil // parse.BeforeDocUpdate has refused it
	}
	var c docChange
	c.db, c.uuid, c.body = db, sizingUUID, doc
	if v, ok := ms.Get("_id"); ok && json.Unmarshal(v, &c.docID) != nil {
		return nil // not a string: parse.BeforeDocUpdate refuses it
	}
	if v, ok := ms.Get("_deleted"); ok && json.Unmarshal(v, &c.deleted) != nil {
		c.deleted = false // only true deletes, as in CouchDB
	}
	rec, _, _ := docRecord(c, opts, time.Now())
	if rec == nil || rec.State == jobdata.Failed {
		return nil // no job, or one that parse.BeforeDocUpdate refuses
	}
	if data, ok := jobstore.EncodeNew(rec, jobstore.SizingKeys(), parse.PersistentJobID(c.uuid, c.docID)); !ok {
		return &parse.Error{Reason: jobstore.TooLargeReason(len(data))}
	}
	return nil
}

// sizingUUID stands for the db's uuid, which the write path does not
// know, in the records checkJobSize builds: a uuid has 32 hex digits.
const sizingUUID = "00000000000000000000000000000000"

// Bounds of a job record's size from its doc's, which let checkJobSize
// skip building the record of a doc that cannot reach the limit. Every
// byte of a record's replication comes from the doc, the db name or the
// options: a byte becomes at most 6 in JSON (a "\u003c" escape), and none
// is used more than twice (a `proxy` for both endpoints, the db name and
// doc id in the record and its replication), so 16 bytes per byte is a
// safe bound; the rest of a record (state, times, an event, the options'
// numbers, the uuid) takes less than recordBase. FuzzRecordBound checks it.
const (
	recordPerByte = 16
	recordBase    = 4096
)

// recordBound is the most bytes the job record of doc in db can take.
func recordBound(db string, doc []byte, opts parse.Options) int {
	return recordPerByte*(len(doc)+len(db)+len(opts.SocketOptions)) + recordBase
}

// mayOutgrow reports whether the job of doc in db may be larger than a
// job can be added with.
func mayOutgrow(db string, doc []byte, opts parse.Options) bool {
	return recordBound(db, doc, opts) > jobstore.MaxNewSize
}

// AfterDocRead hides endpoint credentials from readers who are neither
// admins, the replicator nor the doc's owner (parse.StripCredentials).
func AfterDocRead(doc []byte, user hooks.UserCtx) []byte {
	out, _ := parse.StripCredentials(doc, user)
	return out
}

// docID returns a doc's `_id`, or "" when it has none.
func docID(doc []byte) string {
	var d struct {
		ID string `json:"_id"`
	}
	if json.Unmarshal(doc, &d) != nil {
		return ""
	}
	return d.ID
}
