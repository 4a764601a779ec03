//go:build unix

package storage

import (
	"io/fs"
	"syscall"
)

// nonBlock opens a FIFO without waiting for a writer; a regular file
// ignores it.
const nonBlock = syscall.O_NONBLOCK

// links is fi's count of hard links (1 where the system does not say).
func links(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
