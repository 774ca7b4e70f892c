package store

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/revtree"
	bolt "go.etcd.io/bbolt"
)

// pendingDoc is one document of a write request, its attachment data
// staged before the write transaction.
type pendingDoc struct {
	doc    *Doc
	id     string
	staged []*stagedBlob // parallel to doc.Attachments; nil for stubs
	err    *Error        // failure found while staging
	linked bool          // staged blobs were linked (set inside the transaction)
	// preHash is the rev hash the document gets if it turns out to be new
	// (no parent), computed before the transaction so the writer
	// goroutine does not spend its time hashing bodies.
	preHash string
}

func asError(err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return BadRequest(err.Error())
}

// stage prepares the attachment data of each document.
func (db *DB) stage(ctx context.Context, docs []*Doc, newEdits bool) []pendingDoc {
	prep := make([]pendingDoc, len(docs))
	for i, d := range docs {
		p := &prep[i]
		p.doc, p.id = d, d.ID
		if p.id == "" {
			p.id = newUUID()
		}
		if err := ValidateDocID(p.id); err != nil {
			p.err = asError(err)
			continue
		}
		if strings.HasPrefix(p.id, LocalPrefix) {
			continue
		}
		p.staged = make([]*stagedBlob, len(d.Attachments))
		for j, a := range d.Attachments {
			if a.Stub {
				continue
			}
			var sb *stagedBlob
			var err error
			level, max := db.s.attLimits(a.ContentType, a.Encoding != "" || a.AsStored)
			switch {
			case a.staged != nil:
				sb = a.staged
			case a.Data != nil && max >= 0 && int64(len(a.Data)) > max:
				err = AttachmentTooLarge(a.Name)
			case a.Data != nil:
				sb, err = db.stageData(a.Data, a.Digest, level)
			case a.Reader != nil:
				sb, err = db.stageStream(ctx, a.Reader, a.Digest, level, max, a.Name, declaredLen(&a))
			case a.Follows:
				err = BadRequest("Attachment " + a.Name + " data is missing")
			default:
				sb, err = db.stageData([]byte{}, a.Digest, level)
			}
			if err != nil {
				p.err = asError(err)
				break
			}
			p.staged[j] = sb
		}
		if newEdits && d.Rev == "" && p.err == nil && !slices.ContainsFunc(d.Attachments, func(a Attachment) bool { return a.Stub }) {
			atts, derr := p.resolve(func() *revBody { return nil }, 1, nil)
			if derr == nil {
				p.preHash = couchRevHash(d.Deleted, 0, "", d.Body, atts)
			}
		}
	}
	return prep
}

// release drops streamed chunks that no committed revision references.
func (db *DB) release(prep []pendingDoc) {
	for i := range prep {
		for _, sb := range prep[i].staged {
			if sb != nil && sb.held {
				// StageAttachment's caller releases it.
				sb.linked = sb.linked || prep[i].linked
				continue
			}
			if !prep[i].linked && sb != nil && sb.data == nil {
				db.dropChunks(sb.ref)
			}
		}
	}
}

func (db *DB) bulkDocs(ctx context.Context, docs []*Doc, newEdits bool) ([]BulkResult, error) {
	db.s.attMu.RLock()
	defer db.s.attMu.RUnlock()
	prep := db.stage(ctx, docs, newEdits)
	defer db.release(prep)
	results := make([]BulkResult, len(docs))
	var tc txCounters
	// The arena's memory is given back once doAfter returns: the
	// transaction that used it is then committed or rolled back.
	hint := 0
	for _, d := range docs {
		hint += len(d.Body) + arenaPerDoc
	}
	arena := newArena(hint)
	defer arena.release()
	err := db.s.w.doAfter(ctx, func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		tc = txCounters{db: db.name, store: db.s, arena: arena}
		for i := range prep {
			prep[i].linked = false
			res, err := db.applyDoc(b, &prep[i], newEdits, &tc)
			if err != nil {
				return err
			}
			results[i] = res
		}
		return tc.flush(b)
	}, func() {
		if tc.seq > 0 {
			db.advance(tc.seq)
		}
	})
	if err != nil {
		for i := range prep {
			prep[i].linked = false
		}
		return nil, err
	}
	return results, nil
}

// arenaPerDoc is about what a write encodes for a doc besides its body:
// its record, revs key and seqs key.
const arenaPerDoc = 256

// applyDoc writes one document inside the write transaction. A returned
// error aborts the transaction; document-level failures are in the result.
func (db *DB) applyDoc(b *bolt.Bucket, p *pendingDoc, newEdits bool, tc *txCounters) (BulkResult, error) {
	res := BulkResult{ID: p.id}
	if p.err != nil {
		res.Err = p.err
		return res, nil
	}
	if strings.HasPrefix(p.id, LocalPrefix) {
		rev, derr, err := applyLocal(b, p.id, p.doc, newEdits)
		res.Rev, res.Err = rev, derr
		return res, err
	}
	var rev string
	var derr *Error
	var err error
	before := tc.seq
	if newEdits {
		rev, derr, err = db.applyEdit(b, p.id, p.doc.Rev, p.doc.Deleted, tc, func(parent func() *revBody, gen int) ([]byte, []storedAtt, *Error) {
			atts, derr := p.resolve(parent, gen, nil)
			return p.doc.Body, atts, derr
		}, p)
	} else {
		rev, derr, err = db.applyReplicated(b, p, tc)
	}
	res.Rev, res.Err = rev, derr
	if tc.seq != before {
		res.Seq = tc.seq
	}
	return res, err
}

// resolve turns the written attachments into stored ones, in the order
// written (CouchDB keeps it, and revision ids depend on it): stubs from
// the parent revision (or, for replicated writes, the nearest stored ancestor
// found by lookup), new data with revpos gen (or the given revpos when
// keepRevPos).
func (p *pendingDoc) resolve(parent func() *revBody, gen int, lookup func(name string) (storedAtt, bool)) ([]storedAtt, *Error) {
	atts := make([]storedAtt, 0, len(p.doc.Attachments))
	for j, a := range p.doc.Attachments {
		if a.Stub {
			var sa storedAtt
			ok := false
			if lookup != nil {
				sa, ok = lookup(a.Name)
			} else if pb := parent(); pb != nil {
				sa, ok = pb.att(a.Name)
			}
			if !ok {
				return nil, MissingStub(p.id, a.Name)
			}
			atts = append(atts, sa)
			continue
		}
		sb := p.staged[j]
		sa := storedAtt{Name: a.Name, ContentType: a.ContentType, Digest: sb.digest, Length: sb.length,
			RevPos: gen, Encoding: a.Encoding}
		if lookup != nil && a.RevPos > 0 {
			sa.RevPos = a.RevPos
		}
		switch {
		case sb.encoding != "":
			// compressed by the store
			sa.Encoding, sa.EncodedLength, sa.Length = sb.encoding, sb.length, sb.identityLen
		case sa.Encoding != "":
			// arrived encoded: length is the client's decoded length
			// when it gave one (with encoded_length, 0 is one: an
			// empty text), else the encoded length, as CouchDB keeps
			// an upload it cannot measure
			sa.EncodedLength = sb.length
			if a.Length > 0 || a.EncodedLength > 0 {
				sa.Length = a.Length
			}
		}
		atts = append(atts, sa)
	}
	return atts, nil
}

// link links p's staged blobs in b (once per transaction run).
func (p *pendingDoc) link(db *DB, b *bolt.Bucket) (int64, error) {
	if p == nil || p.linked {
		return 0, nil
	}
	var added int64
	for _, sb := range p.staged {
		if sb == nil {
			continue
		}
		n, err := sb.link(db, b)
		if err != nil {
			return 0, err
		}
		added += n
	}
	p.linked = true
	return added, nil
}

func loadRecord(docs *bolt.Bucket, id string) (*docRecord, error) {
	v := docs.Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	return decodeRecord(v)
}

func loadRevBody(b *bolt.Bucket, id string, rev revtree.Rev) *revBody {
	v := b.Bucket(bucketRevs).Get(revKey(id, rev.String()))
	if v == nil {
		return nil
	}
	rb, err := decodeRevBody(v)
	if err != nil {
		return nil
	}
	return rb
}

// docState summarises a document before a write, for the counters.
type docState struct {
	exists, deleted bool
	seq             uint64
	sizes           docSizes // the document's share of the sizes
}

// stateOf summarises document id with record rec (nil: none) of database
// bucket b.
func stateOf(b *bolt.Bucket, id string, rec *docRecord) (docState, error) {
	if rec == nil {
		return docState{}, nil
	}
	w, _ := rec.tree.Winner()
	sizes, err := leafSizes(b.Bucket(bucketRevs), id, &rec.tree, revtree.Rev{}, nil)
	return docState{exists: true, deleted: w.Deleted, seq: rec.seq, sizes: sizes}, err
}

// editBuilder makes the new revision's body and attachments from the
// parent (loaded on demand; nil when there is none or it is deleted).
type editBuilder func(parent func() *revBody, gen int) ([]byte, []storedAtt, *Error)

// applyEdit writes a new_edits=true revision on top of leaf parentRev ("" =
// create, or recreate a deleted document).
func (db *DB) applyEdit(b *bolt.Bucket, id, parentRev string, deleted bool, tc *txCounters, build editBuilder, p *pendingDoc) (string, *Error, error) {
	rec, err := loadRecord(b.Bucket(bucketDocs), id)
	if err != nil {
		return "", nil, err
	}
	var parent revtree.Rev
	var parentNode revtree.Node
	switch {
	case parentRev == "":
		if rec != nil {
			w, _ := rec.tree.Winner()
			if !w.Deleted {
				return "", ErrConflict, nil
			}
			parent, parentNode = w.Rev, w
		}
	default:
		r, err := revtree.ParseRev(parentRev)
		if err != nil {
			return "", BadRequest("Invalid rev format"), nil
		}
		if rec == nil || !rec.tree.IsLeaf(r) {
			return "", ErrConflict, nil
		}
		parent = r
		parentNode, _ = rec.tree.Get(r)
	}
	loaded := false
	var pb *revBody
	parentBody := func() *revBody {
		if !loaded {
			loaded = true
			if !parent.IsZero() && parentNode.Body && !parentNode.Deleted {
				pb = loadRevBody(b, id, parent)
			}
		}
		return pb
	}
	if parent.Gen >= math.MaxInt64 {
		return "", BadRequest("Invalid rev format"), nil // never wrap
	}
	body, atts, derr := build(parentBody, parent.Gen+1)
	if derr != nil {
		return "", derr, nil
	}
	newRev := revtree.Rev{Gen: parent.Gen + 1}
	if parent.IsZero() && p != nil && p.preHash != "" {
		newRev.Hash = p.preHash
	} else {
		newRev.Hash = couchRevHash(deleted, uint64(parent.Gen), parent.Hash, body, atts)
	}
	before, err := stateOf(b, id, rec)
	if err != nil {
		return "", nil, err
	}
	if rec == nil {
		rec = &docRecord{}
	}
	path := revtree.Path{Start: newRev.Gen, IDs: []string{newRev.Hash}}
	if !parent.IsZero() {
		path.IDs = append(path.IDs, parent.Hash)
	}
	if !rec.tree.Merge(path, deleted, true, 0) {
		return "", ErrConflict, nil
	}
	if err := db.commitRevs(b, id, before, rec, newRev, &revBody{body: body, atts: atts}, p, tc); err != nil {
		return "", nil, err
	}
	return newRev.String(), nil, nil
}

// applyReplicated merges a new_edits=false revision path.
func (db *DB) applyReplicated(b *bolt.Bucket, p *pendingDoc, tc *txCounters) (string, *Error, error) {
	d := p.doc
	var path revtree.Path
	switch {
	case d.Revisions != nil:
		path = revtree.Path{Start: d.Revisions.Start, IDs: d.Revisions.IDs}
	case d.Rev != "":
		r, err := revtree.ParseRev(d.Rev)
		if err != nil {
			return "", BadRequest("Invalid rev format"), nil
		}
		path = revtree.Path{Start: r.Gen, IDs: []string{r.Hash}}
	default:
		return "", BadRequest("When `new_edits: false`, the document needs `_rev` or `_revisions` specified"), nil
	}
	if path.Start < 1 || path.Start > revtree.MaxImportGen || len(path.IDs) == 0 {
		// Out of range generations would wrap on the next update and
		// leave a doc nobody can update or delete.
		return "", BadRequest("Invalid rev format"), nil
	}
	revs := path.Revs()
	newRev := revs[0]
	rec, err := loadRecord(b.Bucket(bucketDocs), p.id)
	if err != nil {
		return "", nil, err
	}
	if rec != nil {
		if n, ok := rec.tree.Get(newRev); ok && n.Body {
			return newRev.String(), nil, nil
		}
	}
	stubRevPos := map[string]int{}
	for _, a := range d.Attachments {
		if a.Stub {
			stubRevPos[a.Name] = a.RevPos
		}
	}
	// A stub names an attachment of the nearest stored ancestor on the
	// path; failing that, of any stored revision of the document with the
	// same name and revpos (its ancestor's body may have been compacted).
	lookup := func(name string) (storedAtt, bool) {
		if rec == nil {
			return storedAtt{}, false
		}
		for _, r := range revs[1:] {
			if n, ok := rec.tree.Get(r); ok && n.Body {
				if pb := loadRevBody(b, p.id, r); pb != nil {
					if a, ok := pb.att(name); ok {
						return a, true
					}
				}
			}
		}
		want := stubRevPos[name]
		for _, n := range rec.tree.Leaves() {
			if !n.Body {
				continue
			}
			if pb := loadRevBody(b, p.id, n.Rev); pb != nil {
				if a, ok := pb.att(name); ok && (want == 0 || a.RevPos == want) {
					return a, true
				}
			}
		}
		return storedAtt{}, false
	}
	atts, derr := p.resolve(nil, newRev.Gen, lookup)
	if derr != nil {
		return "", derr, nil
	}
	before, err := stateOf(b, p.id, rec)
	if err != nil {
		return "", nil, err
	}
	if rec == nil {
		rec = &docRecord{}
	}
	rec.tree.Merge(path, d.Deleted, true, 0)
	if err := db.commitRevs(b, p.id, before, rec, newRev, &revBody{body: d.Body, atts: atts}, p, tc); err != nil {
		return "", nil, err
	}
	if newRev.Spells(d.Rev) {
		return d.Rev, nil, nil // the parser's string for the same rev
	}
	return newRev.String(), nil, nil
}

// commitRevs stores a merged tree with the body of its new revision: links
// attachment data, stems to revs_limit, moves the document to a new update
// seq and adjusts the counters.
func (db *DB) commitRevs(b *bolt.Bucket, id string, before docState, rec *docRecord, newRev revtree.Rev, rb *revBody, p *pendingDoc, tc *txCounters) error {
	meta, revs := b.Bucket(bucketMeta), b.Bucket(bucketRevs)
	attBytes, err := p.link(db, b)
	if err != nil {
		return err
	}
	enc := rb.encodeIn(tc.arena)
	if err := revs.Put(revKeyIn(tc.arena, id, newRev), enc); err != nil {
		return err
	}
	file := attBytes + int64(len(enc))
	rec.tree.SetBody(newRev, true)
	rec.tree.PruneBodiless()
	for _, r := range rec.tree.Stem(db.RevsLimit()) {
		k := revKey(id, r.String())
		if v := revs.Get(k); v != nil {
			file -= int64(len(v))
			if err := revs.Delete(k); err != nil {
				return err
			}
		}
	}
	seq := tc.next(meta)
	w, _ := rec.tree.Winner()
	if before.exists {
		if before.deleted {
			tc.dels--
		} else {
			tc.docs--
		}
		if err := b.Bucket(bucketSeqs).Delete(u64(before.seq)); err != nil {
			return err
		}
	}
	if w.Deleted {
		tc.dels++
	} else {
		tc.docs++
	}
	after, err := leafSizes(revs, id, &rec.tree, newRev, enc)
	if err != nil {
		return err
	}
	tc.file += file
	tc.active += after.active - before.sizes.active
	tc.external += after.external - before.sizes.external
	rec.tree.SetBody(newRev, true)
	rec.seq = seq
	// Keys and values from the arena (bbolt copies keys, keeps values).
	seqKey := binary.BigEndian.AppendUint64(tc.arena.alloc(8), seq)
	idBytes := append(tc.arena.alloc(len(id)), id...)
	if err := b.Bucket(bucketSeqs).Put(seqKey, idBytes); err != nil {
		return err
	}
	return b.Bucket(bucketDocs).Put(idBytes, rec.encodeIn(tc.arena))
}

// txCounters accumulates, over one write transaction, the database's new
// update sequence and counter changes, written once by flush.
type txCounters struct {
	db                     string // the database written, for its _db_updates entry
	store                  *Store
	loaded                 bool
	seq                    uint64 // last seq assigned (0 = none yet)
	docs, dels             int64
	file, active, external int64 // sizes.go
	// arena, when set, holds the keys and values the transaction puts
	// (nil: each is allocated).
	arena *valueArena
}

// next assigns the next update sequence.
func (tc *txCounters) next(meta *bolt.Bucket) uint64 {
	if !tc.loaded {
		tc.loaded = true
		tc.seq = getU64(meta, metaSeq)
	}
	tc.seq++
	return tc.seq
}

// flush writes the sequence and counters to the database's meta bucket.
func (tc *txCounters) flush(b *bolt.Bucket) error {
	if !tc.loaded {
		return nil
	}
	meta := b.Bucket(bucketMeta)
	if err := putU64(meta, metaSeq, tc.seq); err != nil {
		return err
	}
	if tc.store != nil {
		tc.store.markDBUpdate(tc.db)
	}
	for _, c := range []struct {
		k []byte
		d int64
	}{{metaDocCount, tc.docs}, {metaDelCount, tc.dels}, {metaFile, tc.file}, {metaActive, tc.active}, {metaExternal, tc.external}} {
		if err := addU64(meta, c.k, c.d); err != nil {
			return err
		}
	}
	return nil
}

// localRev parses a _local rev "0-N" ("" = 0).
func localRev(s string) (uint64, bool) {
	if s == "" {
		return 0, true
	}
	i := strings.IndexByte(s, '-')
	n, err := strconv.ParseUint(s[i+1:], 10, 64)
	return n, err == nil
}

// applyLocal writes or deletes a _local document (rev "0-N", no history)
// as CouchDB 3 does: there is no conflict check, the new rev is the given
// one plus 1 (0-1 without one), and a delete is 0-0 whether or not the doc
// exists. newEdits makes no difference for _local docs.
func applyLocal(b *bolt.Bucket, id string, d *Doc, _ bool) (string, *Error, error) {
	loc := b.Bucket(bucketLocal)
	given, ok := localRev(d.Rev)
	if !ok {
		return "", BadRequest("Invalid rev format"), nil
	}
	if d.Deleted {
		return "0-0", nil, loc.Delete([]byte(id))
	}
	n := given + 1
	v := binary.AppendUvarint(make([]byte, 0, len(d.Body)+4), n)
	v = append(v, d.Body...)
	return "0-" + strconv.FormatUint(n, 10), nil, loc.Put([]byte(id), v)
}
