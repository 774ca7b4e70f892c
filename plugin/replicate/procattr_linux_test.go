package replicate

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a far-end server die with the test binary, even when
// the binary is killed (test timeout) before TestMain can stop it.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
