package store

import (
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Large attachment data is kept in files of its own, beside the store's
// file: blobs/<database uuid>/<blob id in hex>. Written into bbolt, a
// blob's bytes were copied into pages, written and synced with the
// commit that every other write waits on; a file costs one sequential
// write and its own fsync, in the writing request's goroutine.
//
// A file is written, synced and its directory synced before the atts
// entry that references it commits, so an acknowledged write's data is
// on disk; the entry is what says a file is whole. A crash in between
// leaves a file no entry references: Open and DB.Compact delete those,
// DeleteDB the database's directory. (No temporary name and rename: the
// entry already marks the file done, and the rename took the
// directory's lock once more per attachment, which concurrent writers of
// one database spun on.)
const (
	// fileBlobMin is the size from which a blob is a file.
	fileBlobMin  = 1 << 20
	blobsDirName = "blobs"
)

// blobsDir is the directory of the file blobs of every database.
func (s *Store) blobsDir() string { return filepath.Join(filepath.Dir(s.path), blobsDirName) }

// blobDir is the directory of the file blobs of the database with uuid.
func (s *Store) blobDir(uuid string) string { return filepath.Join(s.blobsDir(), uuid) }

func (db *DB) blobPath(id [8]byte) string {
	return filepath.Join(db.s.blobDir(db.uuid), hex.EncodeToString(id[:]))
}

// createBlobFile creates the file a blob is written into.
func (db *DB) createBlobFile(id [8]byte) (*os.File, error) {
	dir := db.s.blobDir(db.uuid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(db.blobPath(id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

// commitBlobFile makes a written blob file durable: its data and its
// directory entry synced.
func (db *DB) commitBlobFile(f *os.File, id [8]byte) error {
	sync := !db.s.opts.NoSync
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if !sync {
		return nil
	}
	return syncDir(filepath.Dir(db.blobPath(id)))
}

// writeBlobFile stores data as a file blob and returns its ref.
func (db *DB) writeBlobFile(data []byte) (blobRef, error) {
	ref := blobRef{id: newBlobID(), length: int64(len(data)), file: true}
	f, err := db.createBlobFile(ref.id)
	if err != nil {
		return ref, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		db.removeBlobFile(ref.id)
		return ref, err
	}
	if err := db.commitBlobFile(f, ref.id); err != nil {
		db.removeBlobFile(ref.id)
		return ref, err
	}
	return ref, nil
}

// removeBlobFile deletes a blob's file, written or being written.
func (db *DB) removeBlobFile(id [8]byte) { _ = os.Remove(db.blobPath(id)) }

// fileBlobReader streams a file blob.
type fileBlobReader struct {
	f *os.File
}

func (r *fileBlobReader) Read(p []byte) (int, error) { return r.f.Read(p) }

// WriteTo sends the file in chunkSize writes (as blobReader does).
func (r *fileBlobReader) WriteTo(w io.Writer) (int64, error) {
	bp := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(bp)
	// Both wrapped, so that neither the file's WriteTo nor w's ReadFrom
	// takes over with pieces of another size.
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r.f}, (*bp)[:chunkSize])
}

func (r *fileBlobReader) Close() error { return r.f.Close() }

// openBlobFile opens a file blob for reading; a file gone (compacted
// away since its entry was read) is a missing attachment.
func (db *DB) openBlobFile(ref blobRef) (io.ReadCloser, error) {
	f, err := os.Open(db.blobPath(ref.id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errMissingAttachment
	}
	if err != nil {
		return nil, err
	}
	return &fileBlobReader{f: f}, nil
}

// sweepBlobFiles deletes, in the database directory dir, the files of
// blobs not in keep (nil: all, and the directory) and not held: no write
// may be under way (the caller excludes them), so those are what a
// crash or compaction left.
func (s *Store) sweepBlobFiles(dir string, keep map[[8]byte]bool) (removed int) {
	if keep == nil {
		if _, err := os.Stat(dir); err == nil {
			_ = os.RemoveAll(dir)
			removed++
		}
		return removed
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	for _, e := range ents {
		name := e.Name()
		var id [8]byte
		if raw, err := hex.DecodeString(name); err == nil && len(raw) == len(id) {
			copy(id[:], raw)
			if keep[id] || s.isHeld(id) {
				continue
			}
		}
		// Unreferenced, or no blob's name at all (the directory is the
		// store's alone).
		if os.RemoveAll(filepath.Join(dir, name)) == nil {
			removed++
		}
	}
	return removed
}

// fileBlobIDs lists the file blobs database bucket b references.
func fileBlobIDs(b *bolt.Bucket) (map[[8]byte]bool, error) {
	ids := map[[8]byte]bool{}
	err := b.Bucket(bucketAtts).ForEach(func(_, v []byte) error {
		ref, err := decodeBlobRef(v)
		if err == nil && ref.file {
			ids[ref.id] = true
		}
		return err
	})
	return ids, err
}

// sweepOrphanBlobFiles deletes at Open what a crash left: directories of
// databases that are gone, and files no database references.
func (s *Store) sweepOrphanBlobFiles(b *bolt.DB) error {
	ents, err := os.ReadDir(s.blobsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	keep := map[string]map[[8]byte]bool{}
	err = b.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketDBs)
		return root.ForEachBucket(func(name []byte) error {
			db := root.Bucket(name)
			ids, err := fileBlobIDs(db)
			if err != nil {
				return err
			}
			keep[string(db.Bucket(bucketMeta).Get(metaUUID))] = ids
			return nil
		})
	})
	if err != nil {
		return err
	}
	removed := 0
	for _, e := range ents {
		if e.IsDir() {
			removed += s.sweepBlobFiles(filepath.Join(s.blobsDir(), e.Name()), keep[e.Name()])
		}
	}
	if removed > 0 {
		s.log.Info("orphan attachment files removed", "count", removed)
	}
	return nil
}
