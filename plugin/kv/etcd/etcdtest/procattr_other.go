//go:build !linux

package etcdtest

import "os/exec"

// dieWithParent does nothing where the OS has no parent-death signal.
func dieWithParent(cmd *exec.Cmd) {}
