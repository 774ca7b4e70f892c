package store

import (
	"encoding/json"
	"io"
)

// Doc is a document revision to write, as ParseDoc extracts it from a
// client's JSON (or as the HTTP layer builds it for attachment requests).
type Doc struct {
	// ID is "_id". Ids starting with "_local/" address _local documents.
	ID string
	// Rev is "_rev". With new_edits=true it names the leaf being edited
	// ("" creates the document); with new_edits=false it is the revision
	// being stored (Revisions, when set, takes precedence).
	Rev string
	// Revisions is "_revisions": the revision and its ancestors.
	Revisions *Revisions
	// Deleted is "_deleted".
	Deleted bool
	// Body is a JSON object holding the members that do not start with "_",
	// in the order the client sent them ("{}" when there are none).
	Body json.RawMessage
	// Attachments is "_attachments", in the order given.
	Attachments []Attachment
}

// Revisions is CouchDB's "_revisions" object: IDs[0] is the hash of the
// revision at generation Start, IDs[i] of its ancestor at Start-i.
type Revisions struct {
	Start int      `json:"start"`
	IDs   []string `json:"ids"`
}

// Attachment is one attachment of a Doc being written.
type Attachment struct {
	Name        string
	ContentType string
	// Stub: {"stub":true} — keep the attachment the edited revision has
	// under this name (missing_stub if it has none).
	Stub bool
	// Follows: {"follows":true} — the data arrives separately (multipart);
	// the caller sets Reader (or Data) before writing.
	Follows bool
	// Data is the attachment's bytes (decoded from inline base64 "data").
	Data []byte
	// Reader streams the attachment's bytes when Data is nil; the store
	// copies it in chunks and never holds it whole in memory.
	Reader io.Reader
	// Digest is a client-given "md5-<base64>" digest (from the JSON or a
	// Content-MD5 header). When data is given it is verified
	// (ErrDigestMismatch); for stubs it selects nothing and is ignored.
	Digest string
	// Length is the declared length ("length"), informational.
	Length int64
	// RevPos is the "revpos" given; the store sets revpos itself for new
	// data and keeps the stored one for stubs.
	RevPos int
	// Encoding and EncodedLength are "encoding" and "encoded_length":
	// with an encoding ("gzip") the data is the encoded bytes and is
	// stored as it comes; without one the store may gzip it (see
	// AttachmentPolicy). Inline base64 data is always unencoded, as in
	// CouchDB.
	Encoding      string
	EncodedLength int64
	// AsStored: the data is another attachment's stored bytes, in
	// Encoding ("" = identity), and is kept exactly so, never compressed
	// (COPY: CouchDB copies the stored data, its encoding and digest).
	AsStored bool
	// staged is the data DB.StageAttachment already put in the store.
	staged *stagedBlob
}

// DocRev is one stored revision of a document as read.
type DocRev struct {
	ID      string
	Rev     string
	Deleted bool
	// Body is the JSON object of the non-underscore members, as stored.
	Body json.RawMessage
	// Attachments of this revision in CouchDB's order: as the doc
	// listed them, a standalone PUT's first.
	Attachments []AttachmentInfo
	// Revisions is set when GetOptions.Revs was asked for.
	Revisions *Revisions
	// RevsInfo is set when GetOptions.RevsInfo was asked for.
	RevsInfo []RevInfo
	// Conflicts and DeletedConflicts are set when asked for (and non-empty).
	Conflicts        []string
	DeletedConflicts []string
	// LocalSeq is the document's update sequence when GetOptions.LocalSeq
	// was asked for, else 0.
	LocalSeq uint64
	// Seq is the document's current update sequence (always set; 0 for
	// _local documents).
	Seq uint64
	// AttEncodingInfo renders the "encoding" and "encoded_length" of
	// encoded attachments in stubs and inline data (att_encoding_info=true;
	// multipart "follows" renderings always show them, as CouchDB's).
	AttEncodingInfo bool
}

// AttachmentInfo describes a stored attachment of a revision.
type AttachmentInfo struct {
	Name          string
	ContentType   string
	Digest        string // "md5-<base64>" of the stored (encoded) bytes
	Length        int64  // length of the data decoded ("length")
	RevPos        int
	Encoding      string // "" = identity
	EncodedLength int64  // stored length, set when Encoding != ""
	// Stub is true when the reader did not ask for this attachment's data
	// (GetOptions.Attachments / AttsSince); false means the caller should
	// send the data (inline base64 or as a multipart part).
	Stub bool
}

// RevInfo is one entry of "_revs_info".
type RevInfo struct {
	Rev    string `json:"rev"`
	Status string `json:"status"` // "available", "deleted" or "missing"
}

// GetOptions are the query options of a document read.
type GetOptions struct {
	Rev              string   // a specific revision ("" = winner)
	Revs             bool     // include _revisions
	RevsInfo         bool     // include _revs_info
	Conflicts        bool     // include _conflicts
	DeletedConflicts bool     // include _deleted_conflicts
	LocalSeq         bool     // include _local_seq
	Latest           bool     // with Rev / open_revs: return the leaf descending from it
	Attachments      bool     // mark every attachment as wanted with data (Stub=false)
	AttsSince        []string // mark attachments with revpos after these revs' generations as wanted
	AttEncodingInfo  bool     // set DocRev.AttEncodingInfo (att_encoding_info=true)
}

// OpenRev is one result of DB.OpenRevs: either a revision or the rev that
// is missing.
type OpenRev struct {
	Doc     *DocRev
	Missing string
}

// BulkResult is the outcome of one document of DB.BulkDocs, in input order.
type BulkResult struct {
	ID  string
	Rev string // the new revision (new_edits=true) or the stored one
	Err *Error // nil on success
	// Seq is the update sequence this write moved the document to; 0 for
	// _local documents, failures, and replicated revisions already stored.
	Seq uint64
}

// Change is one row of a database's changes feed: a document at its latest
// update sequence.
type Change struct {
	Seq uint64
	ID  string
	// Revs are the leaf revisions, the winner first (style=all_docs; the
	// first alone is main_only).
	Revs []string
	// Deleted reports whether the winning revision is a deletion.
	Deleted bool
}

// ChangesOptions select a range of the changes feed.
type ChangesOptions struct {
	Since      uint64 // exclusive lower bound (upper bound when Descending); 0 = start
	Descending bool
	Limit      int // 0 = no limit (callers handle CouchDB's limit=0 themselves)
}

// ChangesResult summarises an iteration of the changes feed.
type ChangesResult struct {
	LastSeq uint64 // seq of the last row given to the callback (including one that returned ErrStop), or Since if none (UpdateSeq at start when Descending and none)
	Pending int64  // rows left after the last one given (ascending only)
}

// AllDocsOptions select rows of _all_docs (or _local_docs).
type AllDocsOptions struct {
	StartKey     *string // first id (inclusive); nil = from the first
	EndKey       *string // last id; nil = to the last
	ExclusiveEnd bool    // inclusive_end=false
	Descending   bool
	Skip         int
	Limit        int      // 0 = no limit (callers handle limit=0 themselves)
	Keys         []string // when non-nil: exactly these ids, in this order
	// Start, when set, is called once with total_rows and offset before
	// the first row (or before returning, when there are none), so a
	// caller can stream the response header without collecting rows.
	Start func(AllDocsResult)
}

// AllDocsRow is one row of _all_docs.
type AllDocsRow struct {
	ID  string
	Rev string // winning rev
	// Deleted (Keys mode only): the document exists but is deleted.
	Deleted bool
	// Missing (Keys mode only): no such document.
	Missing bool
}

// AllDocsResult carries _all_docs' total_rows and offset.
type AllDocsResult struct {
	TotalRows uint64
	Offset    uint64
}

// RevsDiff is the _revs_diff answer for one document.
type RevsDiff struct {
	Missing           []string `json:"missing"`
	PossibleAncestors []string `json:"possible_ancestors,omitempty"`
}

// DBInfo is what GET /{db} reports.
type DBInfo struct {
	DBName            string
	UUID              string
	DocCount          uint64
	DocDelCount       uint64
	UpdateSeq         uint64
	PurgeSeq          uint64
	Sizes             Sizes
	InstanceStartTime string // always "0", as CouchDB 3
}

// Sizes is db info's "sizes" (bytes), as CouchDB counts them (see
// sizes.go): External is the JSON of the documents' leaf revisions plus
// their attachments' stored bytes, Active the same with the revisions as
// stored, File what the database holds in the store's file (all
// databases share one file), at least Active; File - Active is what
// compaction would reclaim.
type Sizes struct {
	File     int64 `json:"file"`
	External int64 `json:"external"`
	Active   int64 `json:"active"`
}
