package etcdtest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes an etcd process die with the test binary, even when
// the test binary is killed (go test -timeout, SIGKILL).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
