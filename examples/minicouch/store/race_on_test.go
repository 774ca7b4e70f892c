//go:build race

package store

// raceEnabled: the race detector slows the big tests down ~10x; they
// shrink their data.
const raceEnabled = true
