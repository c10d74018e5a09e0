//go:build !unix

package storage

import "os"

// openReadFlags open a file for Get; elsewhere than Unix there are no FIFOs to block on.
const openReadFlags = os.O_RDONLY
