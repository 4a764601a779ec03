//go:build !linux

package redistest

import "syscall"

// dieWithParent: elsewhere than Linux the server outlives a test binary
// that is killed (it is stopped at the end of a normal run).
func dieWithParent() *syscall.SysProcAttr { return nil }
