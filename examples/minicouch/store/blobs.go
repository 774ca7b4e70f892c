package store

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/examples/minicouch/couchgzip"
	bolt "go.etcd.io/bbolt"
)

// Attachment data lives in the blobs bucket: each blob is a bucket of its
// own, named by blob id, holding its chunks keyed by index; the atts
// bucket maps a digest to its blob. A blob is written once per digest per
// database. A bucket per blob keeps writing one from rewriting others:
// chunks of all blobs side by side in one bucket share leaves (bbolt puts
// at least two values in each), and every new blob rewrote the chunks of
// its neighbours, about doubling the bytes written. Stores written before
// keep their blobs' chunks in the blobs bucket itself, keyed by blob id
// and chunk index (chunkKey); those are read and dropped as before.
const (
	chunkSize     = 256 << 10
	chunksPerTx   = 8 // a streamed blob is written in transactions of up to 2 MiB
	blobHeaderLen = 8
)

// blobRef is the value of an atts entry: blob id, length, chunk count,
// then refFile for a blob kept in a file (fileblobs.go).
type blobRef struct {
	id     [8]byte
	length int64
	chunks uint32
	file   bool
}

const refFile = 1

func (r blobRef) encode() []byte {
	buf := append([]byte(nil), r.id[:]...)
	buf = binary.AppendUvarint(buf, uint64(r.length))
	buf = binary.AppendUvarint(buf, uint64(r.chunks))
	if r.file {
		buf = append(buf, refFile)
	}
	return buf
}

func decodeBlobRef(v []byte) (blobRef, error) {
	var r blobRef
	if len(v) < blobHeaderLen {
		return r, errCorrupt
	}
	copy(r.id[:], v)
	l, off, err := readUvarint(v, blobHeaderLen)
	if err != nil {
		return r, err
	}
	c, off, err := readUvarint(v, off)
	if err != nil {
		return r, err
	}
	r.length, r.chunks = int64(l), uint32(c)
	r.file = off < len(v) && v[off] == refFile
	return r, nil
}

// chunkKey is the key of chunk i of a blob of the older layout, in the
// blobs bucket itself.
func chunkKey(id [8]byte, i uint32) []byte {
	k := make([]byte, 12)
	copy(k, id[:])
	binary.BigEndian.PutUint32(k[8:], i)
	return k
}

// chunkIndex is the key of chunk i in a blob's bucket.
func chunkIndex(i uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, i)
}

// getChunk returns chunk i of blob id (nil if missing), of either layout.
func getChunk(bl *bolt.Bucket, id [8]byte, i uint32) []byte {
	if b := bl.Bucket(id[:]); b != nil {
		return b.Get(chunkIndex(i))
	}
	return bl.Get(chunkKey(id, i))
}

// putChunks writes chunks first, first+1, … of blob id from data, each
// chunkSize long but the last.
func putChunks(bl *bolt.Bucket, id [8]byte, first uint32, data []byte) (uint32, error) {
	b, err := bl.CreateBucketIfNotExists(id[:])
	if err != nil {
		return 0, err
	}
	// Chunks are appended in key order: full leaves (bbolt splits at
	// FillPercent of a page otherwise, which only matters for small ones).
	b.FillPercent = 1
	n := uint32(0)
	for off := 0; off < len(data) || n == 0; off += chunkSize {
		end := min(off+chunkSize, len(data))
		if err := b.Put(chunkIndex(first+n), data[off:end]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func newBlobID() [8]byte {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return id
}

// md5Digest formats a digest as CouchDB does: "md5-<base64>".
func md5Digest(h hash.Hash) string {
	return "md5-" + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// stagedBlob is attachment data already in the store (or in memory),
// identified by digest, ready to be referenced by a revision.
type stagedBlob struct {
	digest string  // md5 of the stored bytes
	length int64   // stored bytes
	ref    blobRef // streamed blobs: where the chunks are
	data   []byte  // in-memory data, written with the document
	// encoding is "gzip" when the store compressed the data (then
	// identityLen is its length before), "" when it keeps the bytes as
	// they arrived.
	encoding    string
	identityLen int64
	// held: staged by StageAttachment, whose caller drops it unless
	// linked, a write that committed it to a revision, says otherwise.
	held, linked bool
}

// holdBlob counts a blob staged ahead of its write in (d 1) or out (-1).
func (s *Store) holdBlob(id [8]byte, d int) {
	s.stagedMu.Lock()
	defer s.stagedMu.Unlock()
	if s.staged == nil {
		s.staged = map[[8]byte]int{}
	}
	if s.staged[id] += d; s.staged[id] <= 0 {
		delete(s.staged, id)
	}
}

// isHeld reports whether a blob is staged ahead of its write.
func (s *Store) isHeld(id [8]byte) bool {
	s.stagedMu.Lock()
	defer s.stagedMu.Unlock()
	return s.staged[id] > 0
}

// digestMatches reports whether a client-given digest agrees with the
// computed md5 one; digests of other algorithms are not checked.
func digestMatches(want, got string) bool {
	return !strings.HasPrefix(want, "md5-") || want == got
}

// checkDigest verifies a client digest: of the data as it arrived
// (identity), or, for data the store compressed, of the stored bytes too
// (a client writing back data it read with the digest it read).
func checkDigest(want, identity, stored string) error {
	if digestMatches(want, identity) || stored != "" && want == stored {
		return nil
	}
	return ErrDigestMismatch
}

// declaredLen is the length of the bytes of a as they come, when a says
// it (-1: not said).
func declaredLen(a *Attachment) int64 {
	switch {
	case a.Encoding != "" && a.EncodedLength > 0:
		return a.EncodedLength
	case a.Encoding == "" && a.Length > 0:
		return a.Length
	}
	return -1
}

// stageData is stageDataMem, the data written to a file blob now (out
// of the write transaction) when it is that large.
func (db *DB) stageData(data []byte, want string, level int) (*stagedBlob, error) {
	sb, err := stageDataMem(data, want, level)
	if err != nil || sb.length < fileBlobMin {
		return sb, err
	}
	ref, err := db.writeBlobFile(sb.data)
	if err != nil {
		return nil, err
	}
	sb.ref, sb.data = ref, nil
	return sb, nil
}

// stageDataMem hashes in-memory data, gzips it at level (0: kept as is) and
// checks a client digest.
func stageDataMem(data []byte, want string, level int) (*stagedBlob, error) {
	h := md5.New()
	h.Write(data)
	d := md5Digest(h)
	if level == 0 {
		if err := checkDigest(want, d, ""); err != nil {
			return nil, err
		}
		return &stagedBlob{digest: d, length: int64(len(data)), data: data}, nil
	}
	z, err := couchgzip.Gzip(data, level)
	if err != nil {
		return nil, err
	}
	h.Reset()
	h.Write(z)
	zd := md5Digest(h)
	if err := checkDigest(want, d, zd); err != nil {
		return nil, err
	}
	return &stagedBlob{digest: zd, length: int64(len(z)), data: z, encoding: "gzip", identityLen: int64(len(data))}, nil
}

// blobWriter writes a stream into new blob chunks, in transactions of a
// few MiB so the data is never held whole in memory, hashing what it
// stores; from fileBlobMin bytes on, into a file instead.
type blobWriter struct {
	db *DB
	h  hash.Hash
	// ref counts the chunks and bytes flushed so far.
	ref blobRef
	// buf holds chunksPerTx chunks and is reused: bbolt keeps references
	// to put values only until its transaction commits. Allocated at
	// the first write that needs it (a file blob never does).
	buf    []byte
	filled int
	// f is the file of a file blob, being written.
	f *os.File
}

func (db *DB) newBlobWriter() *blobWriter {
	return &blobWriter{db: db, h: md5.New(), ref: blobRef{id: newBlobID()}}
}

// toFile makes the blob a file one, with what is buffered so far.
func (w *blobWriter) toFile() error {
	f, err := w.db.createBlobFile(w.ref.id)
	if err != nil {
		return err
	}
	w.f, w.ref.file = f, true
	if w.filled > 0 {
		if _, err := f.Write(w.buf[:w.filled]); err != nil {
			return err
		}
		w.ref.length += int64(w.filled)
		w.filled = 0
	}
	w.buf = nil
	return nil
}

// Write implements io.Writer.
func (w *blobWriter) Write(p []byte) (int, error) {
	if w.f == nil && w.ref.chunks == 0 && w.filled+len(p) >= fileBlobMin {
		if err := w.toFile(); err != nil {
			return 0, err
		}
	}
	if w.f != nil {
		w.h.Write(p)
		n, err := w.f.Write(p)
		w.ref.length += int64(n)
		return n, err
	}
	if w.buf == nil {
		w.buf = make([]byte, chunkSize*chunksPerTx)
	}
	n := 0
	for len(p) > 0 {
		k := copy(w.buf[w.filled:], p)
		w.h.Write(p[:k])
		w.filled += k
		n += k
		p = p[k:]
		if w.filled == len(w.buf) {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// finish ends the blob: the buffered bytes flushed, a file made durable.
func (w *blobWriter) finish() error {
	if w.f == nil {
		return w.flush()
	}
	f := w.f
	w.f = nil
	return w.db.commitBlobFile(f, w.ref.id)
}

// abort drops what the writer stored.
func (w *blobWriter) abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.db.dropChunks(w.ref)
}

// flush writes the buffered bytes as chunks (every chunk full but the
// stream's last).
func (w *blobWriter) flush() error {
	if w.filled == 0 {
		return nil
	}
	n := uint32((w.filled + chunkSize - 1) / chunkSize)
	first := w.ref.chunks
	err := w.db.s.update(func(tx *bolt.Tx) error {
		b, err := w.db.bucket(tx)
		if err != nil {
			return err
		}
		_, err = putChunks(b.Bucket(bucketBlobs), w.ref.id, first, w.buf[:w.filled])
		return err
	})
	// Chunks are counted even when the transaction failed: dropChunks
	// then deletes whatever part of them exists.
	w.ref.chunks += n
	w.ref.length += int64(w.filled)
	w.filled = 0
	return err
}

// stageStream copies r into a new blob (gzipped at level; 0: as it
// arrives), checks a client digest and the size bound max (negative:
// none) of the bytes read, attachment name's. hint is the length r says
// it has (-1: unknown): from fileBlobMin on, stored as it comes, the blob
// is a file from the start. The blob is unreferenced until link runs in
// the document's transaction; if the process dies in between, Compact
// (or, for a file, Open) reclaims it.
func (db *DB) stageStream(ctx context.Context, r io.Reader, want string, level int, max int64, name string, hint int64) (*stagedBlob, error) {
	bw := db.newBlobWriter()
	var sink io.Writer = bw
	var zw io.WriteCloser
	if level > 0 {
		var err error
		if zw, err = couchgzip.NewWriter(bw, level); err != nil {
			return nil, err
		}
		sink = zw
	} else if hint >= fileBlobMin && (max < 0 || hint <= max) {
		if err := bw.toFile(); err != nil {
			bw.abort()
			return nil, err
		}
	}
	idh := md5.New() // of the bytes as they arrive
	fail := func(err error) (*stagedBlob, error) {
		if zw != nil {
			zw.Close()
		}
		bw.abort()
		return nil, err
	}
	bp := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(bp)
	in := (*bp)[:chunkSize]
	var read int64
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		n, err := fill(r, in)
		if n > 0 {
			read += int64(n)
			if max >= 0 && read > max {
				return fail(AttachmentTooLarge(name))
			}
			if zw != nil {
				idh.Write(in[:n])
			}
			if _, werr := sink.Write(in[:n]); werr != nil {
				return fail(werr)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return fail(err)
		}
	}
	if err := bw.finish(); err != nil {
		return fail(err)
	}
	sb := &stagedBlob{digest: md5Digest(bw.h), length: bw.ref.length, ref: bw.ref}
	identity := sb.digest
	if zw != nil {
		identity = md5Digest(idh)
		sb.encoding, sb.identityLen = "gzip", read
		if err := checkDigest(want, identity, sb.digest); err != nil {
			return fail(err)
		}
	} else if err := checkDigest(want, identity, ""); err != nil {
		return fail(err)
	}
	return sb, nil
}

// fill reads r into p until p is full or r ends; io.EOF only when r said
// so. (io.ReadFull answers io.ErrUnexpectedEOF for a short last read,
// which hid a reader's own: a body cut short was stored as if whole.)
func fill(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := r.Read(p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// dropChunks deletes a staged blob's chunks or file (best effort;
// Compact reclaims what is left).
func (db *DB) dropChunks(ref blobRef) {
	if ref.file {
		db.removeBlobFile(ref.id)
		return
	}
	_ = db.s.update(func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		return deleteChunks(b.Bucket(bucketBlobs), ref)
	})
}

func deleteChunks(bl *bolt.Bucket, ref blobRef) error {
	if bl.Bucket(ref.id[:]) != nil {
		return bl.DeleteBucket(ref.id[:])
	}
	for i := uint32(0); i < ref.chunks; i++ {
		if err := bl.Delete(chunkKey(ref.id, i)); err != nil {
			return err
		}
	}
	return nil
}

// link makes the staged blob the database's blob for its digest, inside
// the document's transaction. If the digest is already stored, streamed
// chunks are dropped (the data is kept once). It returns the bytes added.
func (sb *stagedBlob) link(db *DB, b *bolt.Bucket) (int64, error) {
	atts, bl := b.Bucket(bucketAtts), b.Bucket(bucketBlobs)
	if atts.Get([]byte(sb.digest)) != nil {
		switch {
		case sb.ref.file:
			// Not referenced, whether this transaction commits or not.
			db.removeBlobFile(sb.ref.id)
		case sb.data == nil:
			return 0, deleteChunks(bl, sb.ref)
		}
		return 0, nil
	}
	ref := sb.ref
	if sb.data != nil {
		ref = blobRef{id: newBlobID(), length: int64(len(sb.data))}
		n, err := putChunks(bl, ref.id, 0, sb.data)
		if err != nil {
			return 0, err
		}
		ref.chunks = n
	}
	return sb.length, atts.Put([]byte(sb.digest), ref.encode())
}

// blobReader streams a blob chunk by chunk, one short read transaction per
// chunk.
type blobReader struct {
	db   *DB
	ref  blobRef
	next uint32
	cur  []byte  // what is left of the chunk loaded last
	buf  *[]byte // the chunk buffer, from chunkBufs
}

// Read implements io.Reader.
func (r *blobReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.next >= r.ref.chunks {
			return 0, io.EOF
		}
		if err := r.load(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// load copies the next chunk out of the file (no read transaction stays
// open while the data goes to a slow client).
func (r *blobReader) load() error {
	err := r.db.view(func(b *bolt.Bucket) error {
		c := getChunk(b.Bucket(bucketBlobs), r.ref.id, r.next)
		if c == nil {
			return errors.New("store: attachment chunk missing")
		}
		if r.buf == nil {
			r.buf = chunkBufs.Get().(*[]byte)
		}
		*r.buf = append((*r.buf)[:0], c...)
		r.cur = *r.buf
		return nil
	})
	if err == nil {
		r.next++
	}
	return err
}

// WriteTo implements io.WriterTo: each chunk goes to w in one write (an
// HTTP answer sends it as one chunk) instead of io.Copy's 32 KiB ones.
func (r *blobReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if len(r.cur) > 0 {
			n, err := w.Write(r.cur)
			total += int64(n)
			r.cur = r.cur[n:]
			if err != nil {
				return total, err
			}
		}
		if r.next >= r.ref.chunks {
			return total, nil
		}
		if err := r.load(); err != nil {
			return total, err
		}
	}
}

// chunkBufs recycles blob readers' chunk buffers: a buffer per
// attachment read was the server's largest garbage.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, chunkSize); return &b }}

// Close implements io.Closer; the reader's buffer goes back to the pool.
func (r *blobReader) Close() error {
	if r.buf != nil {
		*r.buf = (*r.buf)[:0]
		chunkBufs.Put(r.buf)
		r.buf, r.cur = nil, nil
	}
	return nil
}

// attachmentRef is the blob ref db keeps for digest (errMissingAttachment
// when it keeps none).
func (db *DB) attachmentRef(digest string) (blobRef, error) {
	var ref blobRef
	err := db.view(func(b *bolt.Bucket) error {
		v := b.Bucket(bucketAtts).Get([]byte(digest))
		if v == nil {
			return errMissingAttachment
		}
		var err error
		ref, err = decodeBlobRef(v)
		return err
	})
	return ref, err
}

func (db *DB) openAttachment(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	ref, err := db.attachmentRef(digest)
	if err != nil {
		return nil, 0, err
	}
	if ref.file {
		rc, err := db.openBlobFile(ref)
		return rc, ref.length, err
	}
	return &blobReader{db: db, ref: ref}, ref.length, nil
}
