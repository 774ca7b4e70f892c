//go:build !linux

package host

import "os/exec"

// setParentDeathSignal is Linux-only; elsewhere stale plugins are cleaned
// up from the pid files at the next start.
func setParentDeathSignal(*exec.Cmd) {}
