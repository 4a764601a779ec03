package redistest

import "syscall"

// dieWithParent makes the server die with the test binary.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
