//go:build !unix

package storage

// nonBlock is 0 where opening a FIFO is no concern.
const nonBlock = 0
