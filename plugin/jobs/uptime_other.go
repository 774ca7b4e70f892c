//go:build !linux

package jobs

import "time"

// uptime is the lease fence's clock where CLOCK_BOOTTIME is missing: the
// wall clock, which keeps counting while the machine is suspended (a step
// forward of the wall clock makes a lease lost early, never late).
func uptime() time.Duration {
	return time.Duration(time.Now().Round(0).UnixNano())
}
