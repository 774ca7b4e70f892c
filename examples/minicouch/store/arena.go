package store

// bbolt keeps the key and value slices given to Put (not copies) until the
// transaction commits, so every value a write encodes needs memory of its
// own until then. Allocated one by one, a replicated document cost four
// such allocations (its revision body, ~1 KB, its record, its revs key and
// the seqs key), most of the target's allocated bytes; a write request
// now carves them from chunks it takes from a free list and gives back
// once its transaction is over (committed or rolled back: either way
// bbolt no longer holds them).

// arenaChunk is the size of an arena's largest chunks, the ones kept for
// reuse; a value larger than a quarter of it gets memory of its own.
const arenaChunk = 256 << 10

// arenaMinChunk is the smallest first chunk. Chunks grow from the first
// (sized by the write's hint) by doubling up to arenaChunk: a write of a
// few small docs needs a few KB, and when every write started with a
// fresh 256 KB chunk (the free list is empty while hundreds of writes are
// in flight), zeroing them and collecting them was the largest share of
// the server's CPU under many small concurrent writes.
const arenaMinChunk = 4 << 10

// arenaFree holds released full-size chunks for reuse; it is bounded so
// that a burst of concurrent writes does not keep its memory forever.
var arenaFree = make(chan []byte, 16)

// valueArena hands out memory for the keys and values of one write
// request's transaction. The zero valueArena is ready to use; a nil
// *valueArena allocates every slice on its own.
type valueArena struct {
	cur    []byte   // the chunk being carved (len = bytes handed out)
	chunks [][]byte // every chunk taken, for release
	next   int      // size of the next chunk; 0: arenaMinChunk
}

// newArena returns an arena whose first chunk holds about hint bytes.
func newArena(hint int) *valueArena {
	return &valueArena{next: min(max(hint, arenaMinChunk), arenaChunk)}
}

// alloc returns an empty slice with room for n bytes; appending up to n
// bytes to it does not allocate.
func (a *valueArena) alloc(n int) []byte {
	if a == nil || n > arenaChunk/4 {
		return make([]byte, 0, n)
	}
	if cap(a.cur)-len(a.cur) < n {
		size := max(a.next, arenaMinChunk, n)
		if size >= arenaChunk {
			select {
			case c := <-arenaFree:
				a.cur = c[:0]
			default:
				a.cur = make([]byte, 0, arenaChunk)
			}
		} else {
			a.cur = make([]byte, 0, size)
		}
		a.next = min(2*cap(a.cur), arenaChunk)
		a.chunks = append(a.chunks, a.cur)
	}
	l := len(a.cur)
	a.cur = a.cur[:l+n]
	return a.cur[l : l : l+n]
}

// release gives the full-size chunks back for reuse. Nothing handed out
// may be used afterwards: call it only once the transaction that used
// them is over.
func (a *valueArena) release() {
	for _, c := range a.chunks {
		if cap(c) != arenaChunk {
			continue
		}
		select {
		case arenaFree <- c[:0]:
		default:
		}
	}
	a.chunks, a.cur = nil, nil
}
