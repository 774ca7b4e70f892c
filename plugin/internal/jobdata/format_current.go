//go:build !couchepi_nextformat

package jobdata

// format is this version's record format (see Format).
const format = 2
