package store

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/examples/minicouch/revtree"
	bolt "go.etcd.io/bbolt"
)

func (db *DB) get(ctx context.Context, id string, opts GetOptions) (*DocRev, error) {
	if strings.HasPrefix(id, LocalPrefix) {
		return db.getLocal(id, opts)
	}
	var out *DocRev
	err := db.view(func(b *bolt.Bucket) error {
		rec, err := loadRecord(b.Bucket(bucketDocs), id)
		if err != nil {
			return err
		}
		if rec == nil {
			return ErrNotFound
		}
		var rev revtree.Rev
		if opts.Rev == "" {
			w, _ := rec.tree.Winner()
			if w.Deleted {
				return ErrDeleted
			}
			rev = w.Rev
		} else {
			r, err := revtree.ParseRev(opts.Rev)
			if err != nil {
				return BadRequest("Invalid rev format")
			}
			if opts.Latest {
				if l := rec.tree.Latest(r); len(l) > 0 {
					r = l[0]
				}
			}
			rev = r
		}
		out, err = readRev(b, id, rec, rev, opts)
		return err
	})
	return out, err
}

// readRev reads one stored revision with the requested extras.
func readRev(b *bolt.Bucket, id string, rec *docRecord, rev revtree.Rev, opts GetOptions) (*DocRev, error) {
	node, ok := rec.tree.Get(rev)
	if !ok || !node.Body {
		return nil, ErrNotFound
	}
	rb := loadRevBody(b, id, rev)
	if rb == nil {
		return nil, ErrNotFound
	}
	d := &DocRev{ID: id, Rev: rev.String(), Deleted: node.Deleted, Body: rb.body, Seq: rec.seq, AttEncodingInfo: opts.AttEncodingInfo}
	anc := rec.tree.Ancestry(rev)
	if len(rb.atts) > 0 {
		sinceGen := -1 // -1: data only when opts.Attachments
		if len(opts.AttsSince) > 0 {
			sinceGen = 0
			for _, s := range opts.AttsSince {
				if r, err := revtree.ParseRev(s); err == nil && slices.Contains(anc, r) {
					sinceGen = max(sinceGen, r.Gen)
				}
			}
		}
		d.Attachments = make([]AttachmentInfo, len(rb.atts))
		for i, a := range rb.atts {
			ai := a.info()
			switch {
			case sinceGen >= 0:
				ai.Stub = a.RevPos <= sinceGen
			case opts.Attachments:
				ai.Stub = false
			}
			d.Attachments[i] = ai
		}
	}
	if opts.Revs {
		p := rec.tree.PathTo(rev)
		d.Revisions = &Revisions{Start: p.Start, IDs: p.IDs}
	}
	if opts.RevsInfo {
		d.RevsInfo = make([]RevInfo, len(anc))
		for i, r := range anc {
			n, _ := rec.tree.Get(r)
			st := "missing"
			switch {
			case n.Deleted:
				st = "deleted"
			case n.Body:
				st = "available"
			}
			d.RevsInfo[i] = RevInfo{Rev: r.String(), Status: st}
		}
	}
	if opts.Conflicts {
		d.Conflicts = revStrings(rec.tree.Conflicts())
	}
	if opts.DeletedConflicts {
		d.DeletedConflicts = revStrings(rec.tree.DeletedConflicts())
	}
	if opts.LocalSeq {
		d.LocalSeq = rec.seq
	}
	return d, nil
}

func revStrings(revs []revtree.Rev) []string {
	if len(revs) == 0 {
		return nil
	}
	out := make([]string, len(revs))
	for i, r := range revs {
		out[i] = r.String()
	}
	return out
}

func (db *DB) openRevs(ctx context.Context, id string, revs []string, opts GetOptions) ([]OpenRev, error) {
	var out []OpenRev
	err := db.view(func(b *bolt.Bucket) error {
		var err error
		out, err = openRevsIn(b, id, revs, opts)
		return err
	})
	return out, err
}

func (db *DB) openRevsMany(reqs []OpenRevsRequest) []OpenRevsResult {
	out := make([]OpenRevsResult, len(reqs))
	err := db.view(func(b *bolt.Bucket) error {
		for i, r := range reqs {
			out[i].Revs, out[i].Err = openRevsIn(b, r.ID, r.Revs, r.Opts)
		}
		return nil
	})
	if err != nil {
		for i := range out {
			out[i] = OpenRevsResult{Err: err}
		}
	}
	return out
}

// openRevsIn is OpenRevs in the read transaction of db's bucket b.
func openRevsIn(b *bolt.Bucket, id string, revs []string, opts GetOptions) ([]OpenRev, error) {
	var out []OpenRev
	rec, err := loadRecord(b.Bucket(bucketDocs), id)
	if err != nil {
		return nil, err
	}
	if revs == nil {
		if rec == nil {
			return nil, ErrNotFound
		}
		leaves := rec.tree.Leaves()
		slices.SortFunc(leaves, func(a, b revtree.Node) int { return a.Rev.Compare(b.Rev) })
		for _, l := range leaves {
			d, err := readRev(b, id, rec, l.Rev, opts)
			if err != nil {
				out = append(out, OpenRev{Missing: l.Rev.String()})
				continue
			}
			out = append(out, OpenRev{Doc: d})
		}
		return out, nil
	}
	// As CouchDB (fabric_doc_open_revs): the revisions found, each once,
	// in ascending order, then the missing ones, each once, ascending.
	var found, missing []revtree.Rev
	var unparsed []string
	for _, s := range revs {
		r, err := revtree.ParseRev(s)
		if err != nil {
			unparsed = append(unparsed, s)
			continue
		}
		targets := []revtree.Rev{r}
		if rec == nil {
			targets = nil
		} else if opts.Latest {
			targets = rec.tree.Latest(r)
		}
		if len(targets) == 0 {
			missing = append(missing, r)
		}
		found = append(found, targets...)
	}
	slices.SortFunc(found, revtree.Rev.Compare)
	for _, t := range slices.Compact(found) {
		d, err := readRev(b, id, rec, t, opts)
		if err != nil {
			missing = append(missing, t)
			continue
		}
		out = append(out, OpenRev{Doc: d})
	}
	slices.SortFunc(missing, revtree.Rev.Compare)
	for _, m := range slices.Compact(missing) {
		out = append(out, OpenRev{Missing: m.String()})
	}
	for _, s := range unparsed {
		out = append(out, OpenRev{Missing: s})
	}
	return out, nil
}

func (db *DB) getLocal(id string, opts GetOptions) (*DocRev, error) {
	var out *DocRev
	err := db.view(func(b *bolt.Bucket) error {
		v := b.Bucket(bucketLocal).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		n, off, err := readUvarint(v, 0)
		if err != nil {
			return err
		}
		out = &DocRev{ID: id, Rev: "0-" + strconv.FormatUint(n, 10), Body: append([]byte(nil), v[off:]...)}
		if opts.Revs {
			out.Revisions = &Revisions{Start: 0, IDs: []string{strconv.FormatUint(n, 10)}}
		}
		return nil
	})
	return out, err
}

func (db *DB) getAttachment(ctx context.Context, id, rev, name string) (AttachmentInfo, error) {
	d, err := db.get(ctx, id, GetOptions{Rev: rev})
	if err != nil {
		return AttachmentInfo{}, err
	}
	for _, a := range d.Attachments {
		if a.Name == name {
			return a, nil
		}
	}
	return AttachmentInfo{}, errMissingAttachment
}

// editAttachments writes a new revision on leaf rev of id whose body is the
// parent's and whose attachments are the parent's changed by change.
func (db *DB) editAttachments(ctx context.Context, id, rev string, p *pendingDoc, change func(atts []storedAtt, gen int) ([]storedAtt, *Error)) (string, error) {
	var newRev string
	var docErr *Error
	var tc txCounters
	err := db.s.w.doAfter(ctx, func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		tc = txCounters{db: db.name, store: db.s}
		if p != nil {
			p.linked = false
		}
		var derr *Error
		newRev, derr, err = db.applyEdit(b, id, rev, false, &tc, func(parent func() *revBody, gen int) ([]byte, []storedAtt, *Error) {
			body := []byte("{}")
			var atts []storedAtt
			if pb := parent(); pb != nil {
				body, atts = pb.body, slices.Clone(pb.atts)
			}
			atts, derr := change(atts, gen)
			return body, atts, derr
		}, p)
		docErr = derr
		if err != nil {
			return err
		}
		return tc.flush(b)
	}, func() {
		if tc.seq > 0 {
			db.advance(tc.seq)
		}
	})
	if err != nil {
		return "", err
	}
	if docErr != nil {
		return "", docErr
	}
	return newRev, nil
}

func (db *DB) putAttachment(ctx context.Context, id, rev string, att Attachment) (string, error) {
	name := att.Name
	if strings.HasPrefix(name, "_") {
		return "", BadRequest("Attachment name '" + name + "' starts with prohibited character '_'")
	}
	if err := ValidateDocID(id); err != nil {
		return "", err
	}
	if strings.HasPrefix(id, LocalPrefix) {
		return "", BadRequest("Attachments are not supported on _local documents")
	}
	contentType := att.ContentType
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	r := att.Reader
	if r == nil {
		r = bytes.NewReader(att.Data)
	}
	db.s.attMu.RLock()
	defer db.s.attMu.RUnlock()
	level, max := db.s.attLimits(contentType, att.Encoding != "")
	sb, err := db.stageStream(ctx, r, att.Digest, level, max, name, declaredLen(&att))
	if err != nil {
		return "", err
	}
	p := &pendingDoc{id: id, staged: []*stagedBlob{sb}}
	defer func() {
		if !p.linked {
			db.dropChunks(sb.ref)
		}
	}()
	sa := storedAtt{Name: name, ContentType: contentType, Digest: sb.digest, Length: sb.length}
	switch {
	case sb.encoding != "":
		sa.Encoding, sa.EncodedLength, sa.Length = sb.encoding, sb.length, sb.identityLen
	case att.Encoding != "":
		// uploaded encoded: CouchDB cannot tell the decoded length and
		// reports the encoded one as both
		sa.Encoding, sa.EncodedLength = att.Encoding, sb.length
	}
	return db.editAttachments(ctx, id, rev, p, func(atts []storedAtt, gen int) ([]storedAtt, *Error) {
		// as CouchDB: the new attachment first, then the others in
		// their order
		atts = slices.DeleteFunc(atts, func(a storedAtt) bool { return a.Name == name })
		sa.RevPos = gen
		return append([]storedAtt{sa}, atts...), nil
	})
}

func (db *DB) deleteAttachment(ctx context.Context, id, rev, name string) (string, error) {
	return db.editAttachments(ctx, id, rev, nil, func(atts []storedAtt, gen int) ([]storedAtt, *Error) {
		n := len(atts)
		atts = slices.DeleteFunc(atts, func(a storedAtt) bool { return a.Name == name })
		if len(atts) == n {
			return nil, errMissingAttachment
		}
		return atts, nil
	})
}
