// Package childproc ties the servers a test starts (minicouch, etcd, a
// far-end peer) to the test binary, so that none outlives it.
package childproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes cmd's process die with the test binary, even when
// the binary is killed (go test -timeout, SIGKILL) before it can stop it.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
