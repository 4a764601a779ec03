//go:build !linux

package s3test

import "syscall"

// dieWithParent: elsewhere than Linux the server outlives a test binary
// that is killed (it is stopped when its test ends).
func dieWithParent() *syscall.SysProcAttr { return nil }
