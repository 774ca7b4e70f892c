package couchapi

import (
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/couchepi/couchepi/examples/minicouch/store"
)

// CouchDB 3.5's defaults of the attachment settings.
const (
	defaultCompressibleTypes = "text/*, application/javascript, application/json, application/xml"
	defaultCompressionLevel  = 8
	defaultMaxAttachmentSize = 1 << 30 // 1 GiB
)

// attPolicy is the store's AttachmentPolicy over the live configuration:
// `[attachments] compressible_types` and `compression_level`, and
// `[couchdb] max_attachment_size`, read at every write as CouchDB does.
type attPolicy struct {
	cfg *config.Config

	mu    sync.Mutex
	types string           // the compressible_types the patterns are from
	pats  []*regexp.Regexp // compiled from types
}

// CompressionLevel implements store.AttachmentPolicy: level 1..9 when
// contentType is compressible, else 0.
func (p *attPolicy) CompressionLevel(contentType string) int {
	level := p.cfg.Int("attachments", "compression_level", defaultCompressionLevel)
	if level < 1 || level > 9 || !p.compressible(contentType) {
		return 0
	}
	return int(level)
}

// MaxAttachmentSize implements store.AttachmentPolicy ("infinity": no
// bound, -1).
func (p *attPolicy) MaxAttachmentSize() int64 {
	return maxAttachmentSize(p.cfg)
}

func maxAttachmentSize(cfg *config.Config) int64 {
	v := strings.TrimSpace(cfg.GetDefault("couchdb", "max_attachment_size", ""))
	if v == "infinity" {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return defaultMaxAttachmentSize
	}
	return n
}

// compressible matches a content type against compressible_types as
// CouchDB's couch_db:compressible_att_type does: the list is split at
// commas, each entry is a regular expression whose first `*` stands for
// `.*`, matched case-insensitively against the whole type, which may
// carry parameters (`text/plain; charset=utf-8`).
func (p *attPolicy) compressible(contentType string) bool {
	types := p.cfg.GetDefault("attachments", "compressible_types", defaultCompressibleTypes)
	p.mu.Lock()
	if types != p.types || p.pats == nil {
		p.types, p.pats = types, compileTypes(types)
	}
	pats := p.pats
	p.mu.Unlock()
	for _, re := range pats {
		if re.MatchString(contentType) {
			return true
		}
	}
	return false
}

var typeSep = regexp.MustCompile(`\s*,\s*`)

// compileTypes compiles a compressible_types list; an entry that is not
// a valid expression matches nothing.
func compileTypes(types string) []*regexp.Regexp {
	pats := []*regexp.Regexp{}
	for _, t := range typeSep.Split(types, -1) {
		if t == "" {
			continue
		}
		re, err := regexp.Compile(`(?i)^\s*` + strings.Replace(t, "*", ".*", 1) + `(?:\s*;.*?)?\s*$`)
		if err == nil {
			pats = append(pats, re)
		}
	}
	return pats
}

var _ store.AttachmentPolicy = (*attPolicy)(nil)
