package provision

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/locateanything/detect/models"
)

// BundledModel is where the small trained checkpoint shipped in the repository lives
// (docs/tiny-model.md), relative to a checkout: it runs when no weights are configured and
// no LocateAnything-3B snapshot is in the Hugging Face cache, so that the worker finds real
// things (coloured shapes) on a fresh machine. The same files are embedded in the binary.
const BundledModel = "models/tiny-shapes"

// bundledName is the unpacked copy's directory name, which names the model.
const bundledName = "tiny-shapes"

// FindBundled looks for the bundled model under the working directory and under the
// executable's parent directories (bin/worker in a checkout), and returns its absolute path.
func FindBundled() (string, bool) {
	candidates := []string{BundledModel}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(dir, BundledModel), filepath.Join(dir, "..", BundledModel))
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "config.json")); err == nil {
			if abs, err := filepath.Abs(c); err == nil {
				return abs, true
			}
			return c, true
		}
	}
	return "", false
}

// Bundled returns the Request.Bundled of a program: the checkout's copy when there is one
// (FindBundled), else the copy embedded in the binary, unpacked once under dir.
func Bundled(dir string) func() (string, error) {
	return func() (string, error) {
		if found, ok := FindBundled(); ok {
			return found, nil
		}
		return Unpack(models.TinyShapes(), dir)
	}
}

// Unpack writes the checkpoint in fsys to dir/<digest>/tiny-shapes and returns that path;
// the digest covers every file's name and bytes, so a copy is reused only when it is the
// same model, and a binary with another model unpacks beside it. The copy is built in a
// temporary directory and renamed into place, so a reader never sees half of it and two
// workers unpacking at once both end with one complete copy.
func Unpack(fsys fs.FS, dir string) (string, error) {
	digest, err := digestFS(fsys)
	if err != nil {
		return "", fmt.Errorf("bundled model: %w", err)
	}
	parent := filepath.Join(dir, digest)
	final := filepath.Join(parent, bundledName)
	if _, err := os.Stat(filepath.Join(final, "config.json")); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("bundled model: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".unpack-")
	if err != nil {
		return "", fmt.Errorf("bundled model: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; cleans up a failure
	if err := copyFS(fsys, tmp); err != nil {
		return "", fmt.Errorf("bundled model: unpacking into %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "config.json")); serr == nil {
			return final, nil // another process won the race with the same bytes
		}
		return "", fmt.Errorf("bundled model: %w", err)
	}
	return final, nil
}

// digestFS is the first 12 hex digits of a SHA-256 over every regular file's path and bytes,
// in fs.WalkDir's lexical order.
func digestFS(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := fsys.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "%s\x00", path)
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// copyFS writes every file of fsys below dst.
func copyFS(fsys fs.FS, dst string) error {
	return fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return errors.New(path + ": not a regular file")
		}
		src, err := fsys.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
