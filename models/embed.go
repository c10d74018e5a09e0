// Package models carries the bundled checkpoint inside the binary, so that a worker copied
// anywhere still runs its embedded default (provision unpacks it on first use).
package models

import (
	"embed"
	"io/fs"
)

//go:embed tiny-shapes
var files embed.FS

// TinyShapes is the bundled tiny-shapes checkpoint (docs/tiny-model.md): config.json, the
// tokenizer files and model.safetensors at its root.
func TinyShapes() fs.FS {
	sub, err := fs.Sub(files, "tiny-shapes")
	if err != nil { // the directive above guarantees the directory
		panic(err)
	}
	return sub
}
