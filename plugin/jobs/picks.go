package jobs

import (
	"bytes"
	"sync"
	"time"
)

// Cached picks.
//
// In a big tagged queue an accept offers Choose one job per tag, found by
// reading a window of each tag's index (window.go): on etcd a request of
// up to maxTags ranges before the accept's own reads, a third of a choose
// accept's time. A window holds many due jobs, so the queue keeps a
// sample of each one it reads (up to picksKept keys of a tag, for up to
// picksTTL) and offers those before reading again.
//
// Invariants: a cached key is a hint, never trusted. The accept that picks
// it reads the pending entry in its own transaction, as it reads any pick,
// so a job taken or moved since the window was read is skipped (the
// transaction's read of it conflicts with any change before its commit).
// Only always-due entries (stime 0) are cached: they are each their tag's
// earliest, as Choose's candidates must be, for as long as they are
// pending. An acceptor claims the key it picks, removing it, before its
// transaction reads it, so the acceptors of one process offered the same
// key do not all take it to a conflict.

const (
	// picksKept is how many keys of a tag's window read are cached.
	picksKept = 16
	// picksTTL is how long cached keys are offered: a job another node
	// took since is skipped at the cost of a read, and these grow with age.
	picksTTL = tagsTTL
)

// pickCache holds the cached picks of a queue, by type and tag.
type pickCache struct {
	mu sync.Mutex
	m  map[pickSpace]*cachedPicks
}

type pickSpace struct{ typ, tag string }

type cachedPicks struct {
	keys [][]byte // tag index keys of always-due entries, in random order
	at   time.Time
}

// next returns a cached key of typ's tag (not removed), nil when it has
// none read less than picksTTL ago.
func (c *pickCache) next(typ, tag string, now time.Time) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.m[pickSpace{typ, tag}]
	if p == nil || len(p.keys) == 0 {
		return nil
	}
	if now.Sub(p.at) >= picksTTL || now.Before(p.at) {
		delete(c.m, pickSpace{typ, tag})
		return nil
	}
	return p.keys[len(p.keys)-1]
}

// keep caches keys, always-due tag index entries of typ's tag read at now,
// in place of any cached before.
func (c *pickCache) keep(typ, tag string, keys [][]byte, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[pickSpace]*cachedPicks)
	}
	if len(c.m) >= maxTags {
		// Tags come and go; drop those not read for a while.
		for s, p := range c.m {
			if now.Sub(p.at) >= picksTTL || now.Before(p.at) {
				delete(c.m, s)
			}
		}
	}
	if len(keys) == 0 {
		delete(c.m, pickSpace{typ, tag})
		return
	}
	c.m[pickSpace{typ, tag}] = &cachedPicks{keys: keys, at: now}
}

// claim removes key from typ's tag; false when it is not cached (another
// acceptor of this queue claimed it first).
func (c *pickCache) claim(typ, tag string, key []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.m[pickSpace{typ, tag}]
	if p == nil {
		return false
	}
	for i, k := range p.keys {
		if bytes.Equal(k, key) {
			p.keys = append(p.keys[:i], p.keys[i+1:]...)
			return true
		}
	}
	return false
}
