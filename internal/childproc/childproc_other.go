//go:build !linux

// Package childproc ties the servers a test starts (minicouch, etcd, a
// far-end peer) to the test binary, so that none outlives it.
package childproc

import "os/exec"

// DieWithParent does nothing where the OS has no parent-death signal.
func DieWithParent(cmd *exec.Cmd) {}
