//go:build race

package minicouchtest

// RaceEnabled reports whether the test binary runs with the race detector;
// plugins are then built with -race too.
const RaceEnabled = true
