//go:build !unix

package storage

import "io/fs"

// nonBlock is 0 where opening a FIFO is no concern.
const nonBlock = 0

// links is 1: hard links are not checked here.
func links(fs.FileInfo) uint64 { return 1 }
