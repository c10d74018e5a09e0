package console

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"

	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/storage"
)

// TestMakeThumbDecodesAsTheWorkerDoes: a thumbnail is a JPEG of at most ThumbSize on the
// long side with the picture's aspect; a header claiming more than maxThumbPixels is
// refused as too large before any pixel is decoded; bytes no decoder takes are "not a
// picture"; every format the worker reads (JPEG, CMYK JPEG, PNG, WebP) makes one.
func TestMakeThumbDecodesAsTheWorkerDoes(t *testing.T) {
	for _, name := range []string{"../testdata/images/dog.jpg", "../engine/imageproc/testdata/cmyk.jpg", "../engine/imageproc/testdata/big_600x450.png", "../engine/imageproc/testdata/lossless.webp"} {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		thumb, err := makeThumb(src)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(name), err)
		}
		img, _, err := imageproc.Decode(src, 0)
		if err != nil {
			t.Fatal(err)
		}
		orig := image.Config{Width: img.Bounds().Dx(), Height: img.Bounds().Dy()}
		got, err := jpeg.DecodeConfig(bytes.NewReader(thumb))
		if err != nil {
			t.Fatalf("%s: the thumbnail is not a JPEG: %v", filepath.Base(name), err)
		}
		long := max(got.Width, got.Height)
		wantLong := min(ThumbSize, max(orig.Width, orig.Height))
		if long != wantLong || (orig.Width >= orig.Height) != (got.Width >= got.Height) {
			t.Errorf("%s: %dx%d thumbnail of %dx%d; want %d on the long side, same orientation",
				filepath.Base(name), got.Width, got.Height, orig.Width, orig.Height, wantLong)
		}
	}

	if _, err := makeThumb(pngHeader(50000, 50000)); !errors.Is(err, storage.ErrTooLarge) {
		t.Errorf("a 50000x50000 header: %v; want storage.ErrTooLarge", err)
	}
	if _, err := makeThumb([]byte("root:x:0:0:root:/root:/bin/bash\n")); !errors.Is(err, errNotPicture) {
		t.Errorf("text: %v; want errNotPicture", err)
	}
}

// pngHeader is a PNG signature and an IHDR for a w x h RGB image, and nothing more.
func pngHeader(w, h uint32) []byte {
	ihdr := append([]byte("IHDR"), binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, w), h)...)
	ihdr = append(ihdr, 8, 2, 0, 0, 0)
	b := binary.BigEndian.AppendUint32([]byte("\x89PNG\r\n\x1a\n"), uint32(len(ihdr)-4))
	b = append(b, ihdr...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
}
