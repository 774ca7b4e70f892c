//go:build couchepi_nextformat

package jobdata

// format, under the build tag couchepi_nextformat, is one more than this
// version's: a test-only build that stands for the next version, whose
// records this version must leave alone (TestE2EMixedVersions).
const format = 3
