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
		for _, a := range []*valueArena{{}, nil} {
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
				a.release()
				if a.cur != nil || a.chunks != nil {
					t.Errorf("%s: release kept chunks", tc.name)
				}
			}
		}
	}
}
