package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
)

// throughTracker computes the through_seq: the seq of the newest batch such
// that it and every batch before it are fully written. Batches are numbered
// in changes-feed order when they are formed and may complete in any order;
// the checkpoint never moves past a batch that is still in flight.
type throughTracker struct {
	mu      sync.Mutex
	next    uint64                     // ordinal of the next batch
	lowest  uint64                     // lowest ordinal not yet complete
	pending map[uint64]json.RawMessage // completed ordinals above a gap
	open    map[uint64]bool            // ordinals issued but not complete
	through json.RawMessage            // seq of the contiguous prefix
	highest uint64                     // highest completed ordinal + 1 (0 = none)
	highSeq json.RawMessage            // its seq (source_seq)
	moved   chan struct{}              // closed when through moves; nil until waited on
}

func newThroughTracker(start json.RawMessage) *throughTracker {
	return &throughTracker{pending: map[uint64]json.RawMessage{}, open: map[uint64]bool{}, through: start, highSeq: start}
}

// add registers the next batch and returns its ordinal.
func (t *throughTracker) add() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.next
	t.next++
	t.open[o] = true
	return o
}

// complete marks batch ord, whose last change has seq, as fully written.
func (t *throughTracker) complete(ord uint64, seq json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.open[ord] {
		return
	}
	delete(t.open, ord)
	if ord+1 > t.highest {
		t.highest = ord + 1
		t.highSeq = seq
	}
	t.pending[ord] = seq
	for {
		s, ok := t.pending[t.lowest]
		if !ok {
			break
		}
		delete(t.pending, t.lowest)
		t.through = s
		t.lowest++
	}
	if t.moved != nil {
		close(t.moved)
		t.moved = nil
	}
}

// waitThrough waits until the through_seq is seq: every change up to it
// is replicated.
func (t *throughTracker) waitThrough(ctx context.Context, seq json.RawMessage) error {
	for {
		t.mu.Lock()
		if bytes.Equal(t.through, seq) {
			t.mu.Unlock()
			return nil
		}
		if t.moved == nil {
			t.moved = make(chan struct{})
		}
		ch := t.moved
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// seqs returns (through_seq, source_seq).
func (t *throughTracker) seqs() (json.RawMessage, json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.through, t.highSeq
}

// busy reports whether a batch is formed or in flight.
func (t *throughTracker) busy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.open) > 0
}
