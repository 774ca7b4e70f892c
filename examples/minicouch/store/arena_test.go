package store

import (
	"bytes"
	"testing"
)

// TestValueArena checks that each slice the arena hands out has exactly
// the room asked for, that filling them never touches another, and that
// a nil arena allocates.
func TestValueArena(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int
	}{
		{"small", []int{1, 8, 43, 1100}},
		{"fills chunks", []int{60 << 10, 60 << 10, 60 << 10, 60 << 10, 60 << 10}},
		{"larger than a quarter chunk", []int{10, arenaChunk/4 + 1, 10}},
		{"zero", []int{0, 5, 0}},
	}
	for _, tc := range tests {
		for _, a := range []*valueArena{{}, newArena(100), newArena(1 << 20), nil} {
			var got [][]byte
			for i, n := range tc.sizes {
				s := a.alloc(n)
				if len(s) != 0 || cap(s) != n {
					t.Fatalf("%s: alloc(%d) len %d cap %d", tc.name, n, len(s), cap(s))
				}
				got = append(got, append(s, bytes.Repeat([]byte{byte(i + 1)}, n)...))
			}
			for i, s := range got {
				if !bytes.Equal(s, bytes.Repeat([]byte{byte(i + 1)}, tc.sizes[i])) {
					t.Errorf("%s: slice %d was overwritten", tc.name, i)
				}
			}
			if a != nil {
				for _, c := range a.chunks {
					if cap(c) > arenaChunk {
						t.Errorf("%s: a chunk of %d bytes", tc.name, cap(c))
					}
				}
				a.release()
				if a.cur != nil || a.chunks != nil {
					t.Errorf("%s: release kept chunks", tc.name)
				}
			}
		}
	}
}

// TestValueArenaSizedToWrite: a write of a few small docs takes a few KB,
// not a full chunk, and a large one starts with full-size chunks.
func TestValueArenaSizedToWrite(t *testing.T) {
	tests := []struct {
		hint, alloc, want int // want: size of the first chunk
	}{
		{0, 100, arenaMinChunk},
		{2000, 100, arenaMinChunk},
		{20 << 10, 100, 20 << 10},
		{20 << 10, 30 << 10, 30 << 10},
		{1 << 20, 100, arenaChunk},
	}
	for _, tc := range tests {
		a := newArena(tc.hint)
		a.alloc(tc.alloc)
		if got := cap(a.chunks[0]); got != tc.want {
			t.Errorf("hint %d, alloc %d: first chunk %d bytes, want %d", tc.hint, tc.alloc, got, tc.want)
		}
		a.release()
	}
}
