package store

import (
	"bytes"
	"encoding/binary"

	"github.com/couchepi/couchepi/examples/minicouch/revtree"
	bolt "go.etcd.io/bbolt"
)

// A database's sizes are kept as CouchDB keeps them (couch_db_updater's
// flush_trees, summed by the id tree's reduce): each document counts its
// leaf revisions' bodies and, once per distinct attachment among those
// leaves, the attachment's stored bytes (CouchDB's att_len: gzip-encoded
// ones by their encoded bytes). "external" counts the bodies' JSON,
// "active" their stored records; both count the attachments. Bodies of
// revisions that are no longer leaves, and attachment data no leaf
// references, are in the file until compaction drops them, and in
// neither figure. The counters are kept in each database's meta bucket
// and moved by every write by the difference of the document's share
// before and after it, so that GET /{db} reads three numbers.

// sizesVersion marks a database whose counters follow the rules above;
// a store written before them is recounted once when opened.
const sizesVersion = 2

// docSizes is one document's share of its database's sizes.
type docSizes struct{ active, external int64 }

// leafSizes is the share of the document id with revision tree t. The
// record of revision fresh is freshRec when not nil (just encoded, not
// read back); the other leaves' are read from revs.
func leafSizes(revs *bolt.Bucket, id string, t *revtree.Tree, fresh revtree.Rev, freshRec []byte) (docSizes, error) {
	var s docSizes
	var seen [][]byte
	var leaves []revtree.Node
	if t.Len() == 1 {
		// A new document: its one revision, without Leaves' allocations.
		w, _ := t.Winner()
		leaves = []revtree.Node{w}
	} else {
		leaves = t.Leaves()
	}
	for _, n := range leaves {
		if !n.Body {
			continue
		}
		v := freshRec
		if v == nil || n.Rev.Compare(fresh) != 0 {
			v = revs.Get(revKey(id, n.Rev.String()))
		}
		if v == nil {
			continue
		}
		if err := addRecordSizes(v, &s, &seen); err != nil {
			return s, err
		}
	}
	return s, nil
}

// addRecordSizes adds a revision record's body and those of its
// attachments not in seen, which it adds to seen, to s. It reads the
// record in place, as encodeIn wrote it.
func addRecordSizes(v []byte, s *docSizes, seen *[][]byte) error {
	bl, off, err := readUvarint(v, 0)
	if err != nil || bl > uint64(len(v)-off) {
		return errCorrupt
	}
	s.active += int64(len(v))
	s.external += int64(bl)
	off += int(bl)
	na, off, err := readUvarint(v, off)
	if err != nil {
		return err
	}
	for ; na > 0; na-- {
		var digest, enc []byte
		if _, off, err = rawBytes(v, off); err != nil { // name
			return err
		}
		if _, off, err = rawBytes(v, off); err != nil { // content type
			return err
		}
		if digest, off, err = rawBytes(v, off); err != nil {
			return err
		}
		if enc, off, err = rawBytes(v, off); err != nil {
			return err
		}
		var l, el uint64
		if l, off, err = readUvarint(v, off); err != nil {
			return err
		}
		if el, off, err = readUvarint(v, off); err != nil {
			return err
		}
		if _, off, err = readUvarint(v, off); err != nil { // revpos
			return err
		}
		if containsBytes(*seen, digest) {
			continue
		}
		*seen = append(*seen, digest)
		stored := int64(l)
		if len(enc) > 0 {
			stored = int64(el)
		}
		s.active += stored
		s.external += stored
	}
	return nil
}

// rawBytes is readBytes without a copy.
func rawBytes(v []byte, off int) ([]byte, int, error) {
	l, n := binary.Uvarint(v[off:])
	if n <= 0 || l > uint64(len(v)-off-n) {
		return nil, 0, errCorrupt
	}
	off += n
	return v[off : off+int(l)], off + int(l), nil
}

func containsBytes(list [][]byte, b []byte) bool {
	for _, x := range list {
		if bytes.Equal(x, b) {
			return true
		}
	}
	return false
}

// sumLeafSizes is the share of every document of database bucket b.
func sumLeafSizes(b *bolt.Bucket) (docSizes, error) {
	var total docSizes
	revs := b.Bucket(bucketRevs)
	err := b.Bucket(bucketDocs).ForEach(func(k, v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			return err
		}
		s, err := leafSizes(revs, string(k), &rec.tree, revtree.Rev{}, nil)
		total.active += s.active
		total.external += s.external
		return err
	})
	return total, err
}

// storedBytes is what database bucket b holds in the file: every
// revision record and attachment blob, referenced or not.
func storedBytes(b *bolt.Bucket) (int64, error) {
	var n int64
	if err := b.Bucket(bucketRevs).ForEach(func(_, v []byte) error {
		n += int64(len(v))
		return nil
	}); err != nil {
		return 0, err
	}
	err := b.Bucket(bucketAtts).ForEach(func(_, v []byte) error {
		ref, err := decodeBlobRef(v)
		n += ref.length
		return err
	})
	return n, err
}

// putSizes writes a recount of database bucket b's counters.
func putSizes(meta *bolt.Bucket, file int64, live docSizes) error {
	for _, c := range []struct {
		k []byte
		v int64
	}{{metaFile, file}, {metaActive, live.active}, {metaExternal, live.external}, {metaSizesVersion, sizesVersion}} {
		if err := putU64(meta, c.k, uint64(max(c.v, 0))); err != nil {
			return err
		}
	}
	return nil
}

// upgradeSizes recounts, once, the counters of each database written
// before sizesVersion.
func upgradeSizes(tx *bolt.Tx) (int, error) {
	root := tx.Bucket(bucketDBs)
	var names [][]byte
	if err := root.ForEachBucket(func(k []byte) error {
		if meta := root.Bucket(k).Bucket(bucketMeta); meta != nil && getU64(meta, metaSizesVersion) < sizesVersion {
			names = append(names, append([]byte(nil), k...))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for _, name := range names {
		b := root.Bucket(name)
		file, err := storedBytes(b)
		if err != nil {
			return 0, err
		}
		live, err := sumLeafSizes(b)
		if err != nil {
			return 0, err
		}
		if err := putSizes(b.Bucket(bucketMeta), file, live); err != nil {
			return 0, err
		}
	}
	return len(names), nil
}
