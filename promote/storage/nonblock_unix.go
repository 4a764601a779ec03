//go:build unix

package storage

import "syscall"

// nonBlock opens a FIFO without waiting for a writer; a regular file
// ignores it.
const nonBlock = syscall.O_NONBLOCK
