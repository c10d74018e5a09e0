package storage

import (
	"fmt"
	"io/fs"
)

// hardLinkError refuses a regular file with more than one name. A hard link inside a root
// may be another name of a file outside every root (or in a denied or hidden folder), and
// nothing tells where the other names are, so file:// reads only files with one name, as
// it follows a symbolic link only when its target is inside the roots.
func hardLinkError(p string, info fs.FileInfo) error {
	if info.Mode().IsRegular() && linkCount(info) > 1 {
		return fmt.Errorf("%w: %s has other names (hard links), which may lie outside the file roots; "+
			"file:// reads only files with one name", ErrNotAllowed, p)
	}
	return nil
}
