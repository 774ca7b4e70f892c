package store

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// Compact drops the bodies of non-leaf revisions (as CouchDB compaction
// does) and reclaims attachment blobs no stored revision references; then,
// in the background, compacts the store's file if its free pages pass the
// thresholds of Options.FileCompactMinFree and FileCompactMinFreeRatio.
func (db *DB) Compact(ctx context.Context) error {
	err := db.compact(ctx)
	if err == nil {
		db.s.scheduleFileCompaction()
	}
	return err
}

// compact is Compact's first part, under attMu.
func (db *DB) compact(ctx context.Context) error {
	db.s.attMu.Lock()
	defer db.s.attMu.Unlock()
	var droppedBodies, droppedBlobs int
	var live map[[8]byte]bool
	err := db.s.w.do(ctx, func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		droppedBodies, droppedBlobs = 0, 0
		docs, revs, meta := b.Bucket(bucketDocs), b.Bucket(bucketRevs), b.Bucket(bucketMeta)
		var file int64
		type update struct{ k, v []byte }
		var updates []update
		// Drop non-leaf bodies.
		if err := docs.ForEach(func(k, v []byte) error {
			rec, err := decodeRecord(v)
			if err != nil {
				return err
			}
			leaf := map[string]bool{}
			for _, l := range rec.tree.Leaves() {
				leaf[l.Rev.String()] = true
			}
			changed := false
			for _, n := range rec.tree.Nodes() {
				if n.Body && !leaf[n.Rev.String()] {
					if err := revs.Delete(revKey(string(k), n.Rev.String())); err != nil {
						return err
					}
					rec.tree.SetBody(n.Rev, false)
					changed = true
					droppedBodies++
				}
			}
			if changed {
				updates = append(updates, update{append([]byte(nil), k...), rec.encode()})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, u := range updates {
			if err := docs.Put(u.k, u.v); err != nil {
				return err
			}
		}
		// Collect referenced digests and recount sizes.
		used := map[string]bool{}
		if err := revs.ForEach(func(k, v []byte) error {
			rb, err := decodeRevBody(v)
			if err != nil {
				return err
			}
			file += int64(len(v))
			for _, a := range rb.atts {
				used[a.Digest] = true
			}
			return nil
		}); err != nil {
			return err
		}
		// Reclaim unreferenced blobs, and chunks of blobs never linked.
		atts, blobs := b.Bucket(bucketAtts), b.Bucket(bucketBlobs)
		live = map[[8]byte]bool{}
		var dead [][]byte
		if err := atts.ForEach(func(k, v []byte) error {
			ref, err := decodeBlobRef(v)
			if err != nil {
				return err
			}
			if used[string(k)] {
				live[ref.id] = true
				file += ref.length
			} else {
				dead = append(dead, append([]byte(nil), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range dead {
			if err := atts.Delete(k); err != nil {
				return err
			}
		}
		// A blob's bucket (value nil), or a chunk of the older layout.
		var deadChunks, deadBuckets [][]byte
		if err := blobs.ForEach(func(k, v []byte) error {
			var id [8]byte
			copy(id[:], k)
			switch {
			case live[id] || db.s.isHeld(id):
				// Referenced, or staged for a write to come.
			case v == nil:
				deadBuckets = append(deadBuckets, append([]byte(nil), k...))
			default:
				deadChunks = append(deadChunks, append([]byte(nil), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range deadChunks {
			if err := blobs.Delete(k); err != nil {
				return err
			}
		}
		for _, k := range deadBuckets {
			if err := blobs.DeleteBucket(k); err != nil {
				return err
			}
		}
		droppedBlobs = len(dead)
		// What is live does not change; it is recounted here to heal
		// any drift.
		sizes, err := sumLeafSizes(b)
		if err != nil {
			return err
		}
		return putSizes(meta, file, sizes)
	})
	if err == nil {
		// Files of the blobs just unreferenced, and any a crash left:
		// no write is staging one (attMu), held ones stay.
		db.s.sweepBlobFiles(db.s.blobDir(db.uuid), live)
		db.s.log.Debug("database compacted", "db", db.name, "bodies_dropped", droppedBodies, "blobs_reclaimed", droppedBlobs)
	}
	return err
}
