package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/storage"
)

// Item is one image to submit, with the settings that override the run's flags.
type Item struct {
	// Image is an absolute local path, or a storage URL (s3://bucket/key, file:///abs/path)
	// that is passed to the worker as it is.
	Image    string
	Query    string          // "" means the run's --query
	Task     engine.Task     // "" means the run's --task
	Metadata json.RawMessage // a JSON object echoed back in the result; may be nil
	// Origin says where the item came from, for messages: the path as given, or
	// "manifest.csv:12" for a manifest line.
	Origin string
	// Rel is the image's path below the input it was found under (a directory, a glob's
	// fixed part, an s3:// prefix, a manifest's folder), slash-separated: the output
	// directory mirrors it (overlays/cam04/000123.png).
	Rel string

	stem   string // Rel without its extension (assignStems)
	shared bool   // another item of the set has the same stem: the job id tells them apart
}

// Local reports whether the item names a file on this machine (as opposed to a URL).
func (it Item) Local() bool { return !IsURL(it.Image) }

// IsURL reports whether s names an object by URL (s3:// or file://) rather than a local path.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "s3://") || strings.HasPrefix(s, "file://")
}

// imageExtensions are the file name endings a directory walk or an S3 prefix selects.
var imageExtensions = map[string]bool{".jpg": true, ".jpeg": true, ".png": true, ".gif": true, ".webp": true}

func hasImageExtension(name string) bool {
	return imageExtensions[strings.ToLower(filepath.Ext(name))]
}

// isManifest reports whether a file argument is a manifest rather than an image.
func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".jsonl", ".csv":
		return true
	}
	return false
}

// Expand turns command-line arguments into items, in argument order and, within a
// directory, in name order. An argument is
//   - an s3:// or file:// prefix: every image object under it (s3:// needs store);
//   - a manifest (.jsonl or .csv): one item per line, see ReadManifest;
//   - a directory: every image file below it, following symbolic links but visiting each
//     directory once, so a link loop ends instead of recursing;
//   - a file: that file, whatever its extension;
//   - a glob pattern (filepath.Match syntax): each match, expanded as above.
//
// An argument that matches nothing is an error, never silently skipped.
func Expand(ctx context.Context, args []string, store storage.Store) ([]Item, error) {
	var items []Item
	for _, arg := range args {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		got, err := expandArg(ctx, arg, store)
		if err != nil {
			return nil, err
		}
		items = append(items, got...)
	}
	return items, nil
}

func expandArg(ctx context.Context, arg string, store storage.Store) ([]Item, error) {
	if arg == "" {
		return nil, errors.New("empty input argument")
	}
	if IsURL(arg) {
		return listPrefix(ctx, arg, store)
	}
	if _, err := os.Stat(arg); err == nil {
		return expandPath(arg)
	} else if !hasGlobMeta(arg) {
		return nil, fmt.Errorf("input %s: %w", arg, err)
	}
	matches, err := filepath.Glob(arg)
	if err != nil {
		return nil, fmt.Errorf("input %s: bad glob pattern: %w", arg, err)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("input %s: no file matches the pattern", arg)
	}
	root := globRoot(arg)
	var items []Item
	for _, m := range matches {
		got, err := expandPath(m)
		if err != nil {
			return nil, err
		}
		if !isManifest(m) {
			// Below the pattern's fixed part, so that frames/*/cam01 keeps a/cam01/... and
			// b/cam01/... apart.
			for i := range got {
				got[i].Rel = relUnder(root, got[i].Origin)
			}
		}
		items = append(items, got...)
	}
	return items, nil
}

// globRoot is the directory a glob pattern's matches are below: its leading elements
// without pattern characters ("frames/*/cam0?" is below "frames").
func globRoot(pattern string) string {
	dir := filepath.Dir(pattern)
	for hasGlobMeta(dir) {
		dir = filepath.Dir(dir)
	}
	return dir
}

func hasGlobMeta(s string) bool { return strings.ContainsAny(s, `*?[`) }

// expandPath expands an existing local path: a manifest, a directory or one file.
func expandPath(path string) ([]Item, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	if info.IsDir() {
		return walkImages(path)
	}
	if isManifest(path) {
		return ReadManifest(path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	return []Item{{Image: abs, Origin: path, Rel: filepath.Base(abs)}}, nil
}

// dirKey identifies a directory independently of the path it was reached by.
type dirKey struct{ dev, ino uint64 }

func keyOf(info fs.FileInfo) (dirKey, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return dirKey{}, false
	}
	return dirKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true
}

// walkImages lists the image files below root. It follows symbolic links (a frames folder
// is often a link farm) and remembers every directory it entered by device and inode, so a
// link back to an ancestor is entered once and the walk ends.
func walkImages(root string) ([]Item, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", root, err)
	}
	w := walker{visited: map[dirKey]bool{}}
	if err := w.dir(abs, root, ""); err != nil {
		return nil, err
	}
	if len(w.items) == 0 {
		return nil, fmt.Errorf("input %s: no image files (%s) in the directory", root, extensionList())
	}
	return w.items, nil
}

type walker struct {
	visited map[dirKey]bool
	items   []Item
}

// dir walks the directory at abs; shown is the same path as the user would write it, rel
// the same below the walk's root.
func (w *walker) dir(abs, shown, rel string) error {
	info, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("input %s: %w", shown, err)
	}
	if key, ok := keyOf(info); ok {
		if w.visited[key] {
			return nil // reached again through a link: already walked
		}
		w.visited[key] = true
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return fmt.Errorf("input %s: %w", shown, err)
	}
	for _, e := range entries {
		childAbs := filepath.Join(abs, e.Name())
		childShown := filepath.Join(shown, e.Name())
		childRel := path.Join(rel, e.Name())
		mode := e.Type()
		if mode&fs.ModeSymlink != 0 {
			target, err := os.Stat(childAbs)
			if err != nil {
				if hasImageExtension(e.Name()) {
					return fmt.Errorf("input %s: broken link: %w", childShown, err)
				}
				continue // a dangling link to something that is not an image
			}
			mode = target.Mode().Type()
		}
		switch {
		case mode.IsDir():
			if err := w.dir(childAbs, childShown, childRel); err != nil {
				return err
			}
		case mode.IsRegular() && hasImageExtension(e.Name()):
			w.items = append(w.items, Item{Image: childAbs, Origin: childShown, Rel: childRel})
		}
	}
	return nil
}

func extensionList() string {
	return ".jpg .jpeg .png .gif .webp"
}

// listPrefix lists the image objects under a storage URL prefix.
func listPrefix(ctx context.Context, prefix string, store storage.Store) ([]Item, error) {
	if store == nil {
		return nil, fmt.Errorf("input %s: storage is not configured (set LA_S3_ENDPOINT and the other LA_S3_* variables)", prefix)
	}
	var items []Item
	err := store.List(ctx, prefix, func(o storage.Object) bool {
		if hasImageExtension(o.URL) {
			items = append(items, Item{Image: o.URL, Origin: o.URL, Rel: relUnder(prefix, o.URL)})
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("input %s: listing: %w", prefix, err)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("input %s: no image objects (%s) under the prefix", prefix, extensionList())
	}
	return items, nil
}
