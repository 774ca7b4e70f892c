package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// File compaction. bbolt never shrinks its file: pages freed by deleting a
// database (or by DB.Compact) are reused by later writes but stay on disk.
// To give them back, the live data is copied into a new file, which then
// replaces the old one:
//
//  1. bbolt.Compact copies every bucket from a read transaction of the old
//     file into FileName+compactSuffix, without fsync (readers and writers
//     go on meanwhile), then the copy is fsynced.
//  2. If writes committed since the copy's snapshot, catchUp walks both
//     files side by side and applies the difference to the copy (a read of
//     the whole file, a write of what changed). Then writers are stopped
//     (gate); if more writes came meanwhile, catchUp runs again (on a
//     smaller difference) and the copy is fsynced again.
//  3. The copy is renamed over FileName and the directory fsynced, the new
//     file becomes the store's and writers go on. Readers never stop: a
//     read transaction already running on the old file finishes there (the
//     two files hold the same data), later ones open on the new file.
//  4. The old file is closed (after its last reader) and, unlinked by the
//     rename, freed.
//
// Crash safety: until the rename FileName is the old file, untouched by the
// compaction; the rename is atomic and comes after the copy is durable, so
// FileName is always one whole valid file, the old or the new, holding
// every acknowledged write. Open deletes a leftover copy.
const compactSuffix = ".compact"

// compactStep, when set (by tests), is called between the steps of a file
// compaction: "copied" (the copy is written but not durable), "synced" (it
// is durable, not yet renamed) and "renamed" (it is the store's file on
// disk, the old one still open).
var compactStep func(step string)

func step(name string) {
	if compactStep != nil {
		compactStep(name)
	}
}

// compactTxMax bounds the bytes copied per transaction of the new file.
const compactTxMax = 32 << 20

// FileStats describe the store's file.
type FileStats struct {
	Size int64 // bytes on disk
	// Free is the bytes of free pages: the part of Size holding nothing
	// live, that file compaction gives back (bbolt reuses free pages for
	// new writes but never shrinks its file).
	Free     int64
	PageSize int
}

// FileCompaction reports one file compaction.
type FileCompaction struct {
	Before, After int64 // file size in bytes
	// CaughtUp is how many keys and buckets the writes that came during
	// the copy changed: applied to the copy with writers stopped.
	CaughtUp int
	Copy     time.Duration
	// WritePause is how long writers were stopped: the swap, and the
	// catch-up when writes came during the copy.
	WritePause time.Duration
}

// fileCompactor serializes file compactions and lets Close wait for them.
type fileCompactor struct {
	mu      sync.Mutex // held by a running compaction
	queued  atomic.Bool
	closing bool
	wg      sync.WaitGroup
	wgMu    sync.Mutex // closing and wg.Add
}

// close stops scheduling and waits for a running compaction.
func (fc *fileCompactor) close() {
	fc.wgMu.Lock()
	fc.closing = true
	fc.wgMu.Unlock()
	fc.wg.Wait()
	fc.mu.Lock() // a CompactFile call
	fc.mu.Unlock()
}

// FileStats returns the size and free space of the store's file.
func (s *Store) FileStats() (FileStats, error) {
	var out FileStats
	err := s.view(func(tx *bolt.Tx) error {
		// Inside a transaction the file cannot be closed under us.
		b := tx.DB()
		st := b.Stats()
		out.PageSize = b.Info().PageSize
		out.Free = int64(st.FreePageN+st.PendingPageN) * int64(out.PageSize)
		fi, err := os.Stat(s.path)
		if err != nil {
			return err
		}
		out.Size = fi.Size()
		return nil
	})
	return out, err
}

// thresholds returns the configured minimum free bytes (negative: never)
// and ratio.
func (s *Store) thresholds() (int64, float64) {
	min, ratio := s.opts.FileCompactMinFree, s.opts.FileCompactMinFreeRatio
	if min == 0 {
		min = 64 << 20
	}
	if ratio <= 0 || ratio > 1 {
		ratio = 0.5
	}
	return min, ratio
}

// worthCompacting reports whether the file's free pages pass both
// thresholds.
func (s *Store) worthCompacting(st FileStats) bool {
	min, ratio := s.thresholds()
	return min >= 0 && st.Free >= min && float64(st.Free) >= ratio*float64(st.Size)
}

// scheduleFileCompaction compacts the file in the background if it is
// worth it (called after a database is deleted or compacted). At most one
// is queued behind a running one.
func (s *Store) scheduleFileCompaction() {
	if min, _ := s.thresholds(); min < 0 {
		return
	}
	if !s.fc.queued.CompareAndSwap(false, true) {
		return
	}
	s.fc.wgMu.Lock()
	defer s.fc.wgMu.Unlock()
	if s.fc.closing {
		s.fc.queued.Store(false)
		return
	}
	s.fc.wg.Add(1)
	go func() {
		defer s.fc.wg.Done()
		res, err := s.compactFile(context.Background(), false)
		switch {
		case errors.Is(err, errClosed):
		case err != nil:
			s.log.Warn("file compaction failed", "error", err)
		case res.Before > 0:
			s.log.Info("file compacted", "before", res.Before, "after", res.After, "caught_up", res.CaughtUp,
				"copy", res.Copy, "write_pause", res.WritePause)
		}
	}()
}

// CompactFile copies the live data into a new file that replaces the
// store's, giving the free pages back to the filesystem, whatever their
// amount. Reads go on throughout; writes wait only for the swap unless
// they keep coming (see FileCompaction.WritePause).
func (s *Store) CompactFile(ctx context.Context) (FileCompaction, error) {
	return s.compactFile(ctx, true)
}

// compactFile compacts the file; unless force, only if worthCompacting.
// It returns a zero FileCompaction when it did nothing.
func (s *Store) compactFile(ctx context.Context, force bool) (FileCompaction, error) {
	s.fc.mu.Lock()
	defer s.fc.mu.Unlock()
	s.fc.queued.Store(false)
	s.fc.wgMu.Lock()
	closing := s.fc.closing
	s.fc.wgMu.Unlock()
	if closing {
		return FileCompaction{}, errClosed
	}
	st, err := s.FileStats()
	if err != nil {
		return FileCompaction{}, err
	}
	if !force && !s.worthCompacting(st) {
		return FileCompaction{}, nil
	}
	res := FileCompaction{Before: st.Size}
	tmp := s.path + compactSuffix
	start := time.Now()
	dst, src, txid, err := s.copyFile(tmp)
	res.Copy = time.Since(start)
	if err != nil {
		return res, err
	}
	// Writes that came during the copy: applied once with writers going
	// on (most of them), then again after stopping them (the rest).
	if now, err := lastTxID(src); err == nil && now != txid {
		var n int
		txid, n, err = catchUp(dst, src)
		res.CaughtUp += n
		if err == nil {
			// dst is written without fsync: this one makes the catch-up
			// durable even if no write comes before the rename.
			err = dst.Sync()
		}
		if err != nil {
			dst.Close()
			os.Remove(tmp)
			return res, fmt.Errorf("catch up the compaction file: %w", err)
		}
	}
	s.gate.Lock()
	paused := time.Now()
	err = func() error {
		now, err := lastTxID(src)
		if err != nil {
			return err
		}
		if now != txid {
			var n int
			_, n, err = catchUp(dst, src)
			res.CaughtUp += n
			if err != nil {
				return fmt.Errorf("catch up the compaction file: %w", err)
			}
			if err := dst.Sync(); err != nil {
				return err
			}
			step("caught-up")
		}
		return s.swap(dst, tmp)
	}()
	if err != nil {
		s.gate.Unlock()
		dst.Close()
		os.Remove(tmp)
		return res, err
	}
	s.gate.Unlock()
	res.WritePause = time.Since(paused)
	// Waits for the old file's last read transaction.
	if err := src.Close(); err != nil {
		s.log.Warn("closing the file replaced by compaction", "error", err)
	}
	if fi, err := os.Stat(s.path); err == nil {
		res.After = fi.Size()
	}
	return res, nil
}

// copyFile copies the current file into a new file at tmp, durable. It
// returns the copy, the file it copied and that file's last committed
// transaction before the copy began (the copy holds at least that).
func (s *Store) copyFile(tmp string) (dst, src *bolt.DB, txid int, err error) {
	src = s.cur.Load()
	if txid, err = lastTxID(src); err != nil {
		return nil, nil, 0, err
	}
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return nil, nil, 0, err
	}
	o := boltOptions(s.opts)
	// Written without fsync, which comes once at the end; without
	// growing in AllocSize steps, so the file ends at its last page.
	o.NoSync, o.NoGrowSync, o.Timeout = true, true, time.Second
	dst, err = bolt.Open(tmp, 0o600, o)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("open compaction file: %w", err)
	}
	fail := func(err error) (*bolt.DB, *bolt.DB, int, error) {
		dst.Close()
		os.Remove(tmp)
		return nil, nil, 0, err
	}
	if err := bolt.Compact(dst, src, compactTxMax); err != nil {
		return fail(fmt.Errorf("copy into compaction file: %w", err))
	}
	step("copied")
	if err := dst.Sync(); err != nil {
		return fail(err)
	}
	step("synced")
	return dst, src, txid, nil
}

// swap renames the durable copy over the store's file and makes it the
// current file. The caller holds gate.
func (s *Store) swap(dst *bolt.DB, tmp string) error {
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	step("renamed")
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		// The rename happened: the new file is the store now, durable or
		// not, and the old one holds the same data.
		s.log.Warn("fsync of the data directory after file compaction", "error", err)
	}
	dst.NoSync = s.opts.NoSync
	dst.NoGrowSync = false
	dst.AllocSize = allocSize
	s.cur.Store(dst)
	return nil
}

// lastTxID is the id of b's last committed write transaction.
func lastTxID(b *bolt.DB) (int, error) {
	var id int
	err := b.View(func(tx *bolt.Tx) error {
		id = tx.ID()
		return nil
	})
	return id, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// bucketish is what a transaction (the root) and a bucket have in common.
type bucketish interface {
	Cursor() *bolt.Cursor
	Bucket(name []byte) *bolt.Bucket
	CreateBucket(name []byte) (*bolt.Bucket, error)
	DeleteBucket(name []byte) error
}

// catchUp makes dst hold exactly what a read transaction of src holds,
// in one transaction of dst, and returns that transaction's id (the last
// write it saw) and how many keys and buckets it put, deleted or created.
func catchUp(dst, src *bolt.DB) (txid, n int, err error) {
	err = src.View(func(stx *bolt.Tx) error {
		txid = stx.ID()
		return dst.Update(func(dtx *bolt.Tx) error {
			return syncBucket(dtx, stx, &n)
		})
	})
	return txid, n, err
}

// syncBucket makes bucket d (of a write transaction) hold what s holds:
// a merge walk of both in key order collects the difference, which is
// applied after the walk (bbolt cursors do not survive writes), then the
// nested buckets both have are synced in turn.
func syncBucket(d, s bucketish, n *int) error {
	if db, ok := d.(*bolt.Bucket); ok {
		if seq := s.(*bolt.Bucket).Sequence(); db.Sequence() != seq {
			if err := db.SetSequence(seq); err != nil {
				return err
			}
			*n++
		}
	}
	type op struct {
		k, v     []byte
		put, del bool // v == nil with put: create the bucket from s
		isBucket bool // del: k is a bucket
	}
	var ops []op
	var both [][]byte // nested buckets in both
	cs, cd := s.Cursor(), d.Cursor()
	ks, vs := cs.First()
	kd, vd := cd.First()
	for ks != nil || kd != nil {
		c := 0
		switch {
		case ks == nil:
			c = 1
		case kd == nil:
			c = -1
		default:
			c = bytes.Compare(ks, kd)
		}
		sBucket := ks != nil && vs == nil && s.Bucket(ks) != nil
		dBucket := kd != nil && vd == nil && d.Bucket(kd) != nil
		switch {
		case c < 0:
			ops = append(ops, op{k: clone(ks), v: cloneValue(vs, sBucket), put: true})
			ks, vs = cs.Next()
		case c > 0:
			ops = append(ops, op{k: clone(kd), del: true, isBucket: dBucket})
			kd, vd = cd.Next()
		default:
			switch {
			case sBucket && dBucket:
				both = append(both, clone(ks))
			case sBucket != dBucket:
				ops = append(ops, op{k: clone(kd), del: true, isBucket: dBucket})
				ops = append(ops, op{k: clone(ks), v: cloneValue(vs, sBucket), put: true})
			case !bytes.Equal(vs, vd):
				ops = append(ops, op{k: clone(ks), v: clone(vs), put: true})
			}
			ks, vs = cs.Next()
			kd, vd = cd.Next()
		}
	}
	for _, o := range ops {
		*n++
		var err error
		switch {
		case o.del && o.isBucket:
			err = d.DeleteBucket(o.k)
		case o.del:
			err = d.(*bolt.Bucket).Delete(o.k)
		case o.v != nil:
			err = d.(*bolt.Bucket).Put(o.k, o.v)
		default:
			var nb *bolt.Bucket
			if nb, err = d.CreateBucket(o.k); err == nil {
				err = syncBucket(nb, s.Bucket(o.k), n)
			}
		}
		if err != nil {
			return err
		}
	}
	for _, k := range both {
		if err := syncBucket(d.Bucket(k), s.Bucket(k), n); err != nil {
			return err
		}
	}
	return nil
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

// cloneValue copies a value; nil for a bucket.
func cloneValue(v []byte, bucket bool) []byte {
	if bucket {
		return nil
	}
	return clone(v)
}
