package jobs

import (
	"time"

	"golang.org/x/sys/unix"
)

// uptime is the lease fence's clock: time since boot, counting the time
// the machine (or VM) was suspended, which Go's monotonic clock
// (CLOCK_MONOTONIC) leaves out. Zero if the clock cannot be read, so the
// monotonic clock alone bounds the lease.
func uptime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
