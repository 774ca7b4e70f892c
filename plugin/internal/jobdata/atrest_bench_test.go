package jobdata

import (
	"testing"
	"time"
)

// BenchmarkEncodeRunning is a running job's stats update: the record is
// encoded again with its endpoints and binding unchanged, so the sealed
// value is re-used (the binding is computed, nothing is sealed).
func BenchmarkEncodeRunning(b *testing.B) {
	rec, err := Decode(New(secretRep(), "db/_replicator", "u1", "doc", time.Unix(1, 0)).Encode(testKeys, "j"), testKeys, "j")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rec.Stats.DocsRead++
		rec.Encode(testKeys, "j")
	}
}

// BenchmarkDecode opens a record: what a worker does once per run.
func BenchmarkDecode(b *testing.B) {
	data := New(secretRep(), "db/_replicator", "u1", "doc", time.Unix(1, 0)).Encode(testKeys, "j")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data, testKeys, "j"); err != nil {
			b.Fatal(err)
		}
	}
}
