package console

import (
	"embed"
	"io/fs"
)

// assets holds the page: index.html, app.js and app.css, plain files with no build step,
// embedded so that the worker binary serves the console with nothing beside it.
//
//go:embed assets
var assets embed.FS

// Assets is the console's static files, rooted at the assets directory (index.html at its
// top).
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		// fs.Sub fails only for an invalid path name, and "assets" is a valid one.
		panic(err)
	}
	return sub
}
