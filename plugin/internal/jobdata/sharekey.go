package jobdata

import (
	"encoding/json"

	"github.com/couchepi/couchepi/parse"
)

// ShareKey returns the fair-share key of a job (CouchDB 3.2+, RFC 017): the
// replicator db of a persistent job, the user name of a transient one.
func (r *Record) ShareKey() string {
	if r.Transient() {
		if r.Rep == nil {
			return ""
		}
		return r.Rep.UserCtx.Name
	}
	return r.DBName
}

// shareFields is the part of a record ShareTag reads.
type shareFields struct {
	DBName string `json:"db_name"`
	DocID  string `json:"doc_id"`
	Rep    *struct {
		UserCtx parse.UserCtx `json:"user_ctx"`
	} `json:"rep"`
}

// ShareTag is the jobs.Options.Tag of the replicator's queue: the fair-share
// key of the job whose data is given (see Record.ShareKey), "" when the data
// does not decode. It reads only the fields it needs.
func ShareTag(_, _ string, data []byte) string {
	var f shareFields
	if json.Unmarshal(data, &f) != nil {
		return ""
	}
	if f.DocID == "" {
		if f.Rep == nil {
			return ""
		}
		return f.Rep.UserCtx.Name
	}
	return f.DBName
}
