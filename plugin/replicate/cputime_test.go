package replicate

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU is the user+system CPU time a process has used so far, read from
// /proc/<pid>/stat; ok is false where /proc is not available.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the parenthesised command name: state is field 3,
	// utime field 14, stime field 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * clockTick, true
}

// selfCPU is the CPU time this test process (the replicator, or the raw
// benchmark client) has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter measures the CPU time used by the benchmark's servers and by this
// process over one phase.
type cpuMeter struct {
	pids  []int
	start []time.Duration
	self  time.Duration
}

// startCPU begins a phase for the given server processes.
func startCPU(servers ...*testServer) *cpuMeter {
	m := &cpuMeter{self: selfCPU()}
	for _, s := range servers {
		pid := s.pid()
		t, _ := procCPU(pid)
		m.pids = append(m.pids, pid)
		m.start = append(m.start, t)
	}
	return m
}

// stop ends the phase: the CPU time of each server (in startCPU's order;
// -1 where unknown) and of this process.
func (m *cpuMeter) stop() (servers []time.Duration, self time.Duration) {
	for i, pid := range m.pids {
		t, ok := procCPU(pid)
		if !ok {
			servers = append(servers, -1)
			continue
		}
		servers = append(servers, t-m.start[i])
	}
	return servers, selfCPU() - m.self
}
