//go:build !unix

package storage

import (
	"io/fs"
	"os"
)

// openReadFlags open a file for Get; elsewhere than Unix there are no FIFOs to block on.
const openReadFlags = os.O_RDONLY

// linkCount is the number of names (hard links) the file of info has: one, where the
// system does not say.
func linkCount(fs.FileInfo) uint64 { return 1 }
