//go:build !linux

package replicate

import "os/exec"

// dieWithParent is a no-op where the OS has no parent-death signal.
func dieWithParent(cmd *exec.Cmd) {}
