package store

import (
	"sync/atomic"

	"github.com/couchepi/couchepi/examples/minicouch/couchgzip"
)

// AttachmentPolicy decides how the store keeps new attachment data. The
// HTTP layer implements it over the server's configuration, which it
// reads at every write, as CouchDB reads its config.
type AttachmentPolicy interface {
	// CompressionLevel is the gzip level (1..9) new data of contentType
	// that arrives unencoded is stored with; any other value stores it
	// as it arrives (CouchDB's `[attachments] compressible_types` and
	// `compression_level`).
	CompressionLevel(contentType string) int
	// MaxAttachmentSize bounds the bytes of one attachment as they
	// arrive (encoded ones counted encoded); negative: no bound
	// (CouchDB's `[couchdb] max_attachment_size`).
	MaxAttachmentSize() int64
}

type policyBox struct{ p AttachmentPolicy }

// SetAttachmentPolicy sets how new attachment data is stored; without a
// policy every attachment is stored as it arrives, without a size bound.
func (s *Store) SetAttachmentPolicy(p AttachmentPolicy) {
	s.policy.Store(&policyBox{p})
}

// attLimits returns the compression level for new unencoded data of
// contentType (0: none) and the size bound (negative: none).
func (s *Store) attLimits(contentType string, encoded bool) (level int, max int64) {
	b := s.policy.Load()
	if b == nil || b.p == nil {
		return 0, -1
	}
	if !encoded {
		level = b.p.CompressionLevel(contentType)
		if level < couchgzip.MinLevel || level > couchgzip.MaxLevel {
			level = 0
		}
	}
	return level, b.p.MaxAttachmentSize()
}

// AttachmentTooLarge is CouchDB's 413 for attachment name above
// `[couchdb] max_attachment_size`.
func AttachmentTooLarge(name string) *Error {
	return &Error{Status: 413, Err: "attachment_too_large", Reason: name}
}

// policyPointer is the Store field holding the policy.
type policyPointer = atomic.Pointer[policyBox]
