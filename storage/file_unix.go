//go:build unix

package storage

import (
	"io/fs"
	"os"
	"syscall"
)

// openReadFlags open a file for Get without blocking: a FIFO (or a device that waits) swapped
// in after the type check opens at once instead of holding the worker until a writer comes,
// and a terminal does not become the process's controlling one. Reads of a regular file
// ignore O_NONBLOCK.
const openReadFlags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY

// linkCount is the number of names (hard links) the file of info has.
func linkCount(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
