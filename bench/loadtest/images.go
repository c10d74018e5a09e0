package loadtest

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	_ "image/png" // photographs may come as PNG; they are re-encoded as JPEG
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/image/draw"
)

// The frame size the load test feeds the worker: 1080p, what the cameras the service is
// built for deliver.
const (
	frameW = 1920
	frameH = 1080
)

// frames is the image set of a run: 1920x1080 JPEGs in one directory.
type frames struct {
	dir       string
	paths     []string // absolute, in name order
	generated int      // how many were made from photographs of another size or format
	bytes     int64    // total size of the JPEGs
}

// prepareFrames puts a 1920x1080 JPEG for every image in src into dst: a JPEG that is
// already 1920x1080 is copied as it is; any other photograph is scaled to cover the frame,
// centre-cropped and encoded at quality 90.
func prepareFrames(src, dst string) (*frames, error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	f := &frames{dir: dst}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || !slices.Contains([]string{".jpg", ".jpeg", ".png"}, ext) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		out, made, err := frame(data)
		if err != nil {
			return nil, fmt.Errorf("images: %s: %w", e.Name(), err)
		}
		path := filepath.Join(dst, strings.TrimSuffix(e.Name(), filepath.Ext(e.Name()))+".jpg")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		f.paths = append(f.paths, path)
		f.bytes += int64(len(out))
		if made {
			f.generated++
		}
	}
	if len(f.paths) == 0 {
		return nil, fmt.Errorf("images: no .jpg, .jpeg or .png file in %s", src)
	}
	return f, nil
}

// frame returns data itself when it is a 1920x1080 JPEG, else a 1920x1080 JPEG made from it.
func frame(data []byte) (out []byte, generated bool, err error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, false, err
	}
	if format == "jpeg" && cfg.Width == frameW && cfg.Height == frameH {
		return data, false, nil
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, false, err
	}
	// Scale to cover the frame, then take its centre.
	b := img.Bounds()
	scale := max(float64(frameW)/float64(b.Dx()), float64(frameH)/float64(b.Dy()))
	cw, ch := int(float64(frameW)/scale+0.5), int(float64(frameH)/scale+0.5)
	crop := image.Rect(0, 0, min(cw, b.Dx()), min(ch, b.Dy())).Add(b.Min).
		Add(image.Pt((b.Dx()-min(cw, b.Dx()))/2, (b.Dy()-min(ch, b.Dy()))/2))
	dst := image.NewRGBA(image.Rect(0, 0, frameW, frameH))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, crop, draw.Src, nil)
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, dst, &jpeg.Options{Quality: 90}); err != nil {
		return nil, false, err
	}
	return buf.Bytes(), true, nil
}
