//go:build linux

package promote

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback starts writing f's dirty pages without waiting for them
// (sync_file_range(2), SYNC_FILE_RANGE_WRITE): started for every file of a
// publication before the first fsync, their block allocations can fall in
// the journal transaction that fsync commits (on a journaled ext4 it took
// the device writes of a publication from 17.1 to 14.4:
// docs/benchmarks-history.md#what-paid-and-what-did-not). It
// is a hint: the fsync that follows is what makes the file durable, and
// a filesystem that refuses the call changes nothing.
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
