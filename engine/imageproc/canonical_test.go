package imageproc

import (
	"bytes"
	"testing"

	"github.com/locateanything/detect/engine"
)

// TestCanonical: the canonical image of a golden case is PIL's, its sizes follow from it,
// and EncodePNG writes exactly its samples.
func TestCanonical(t *testing.T) {
	for _, g := range loadGoldens(t) {
		if g.Name != "dog_canon_24x44" && g.Name != "rgba_png_1024" {
			continue
		}
		c, err := g.options().Canonical(mustRead(t, g.Input))
		if err != nil {
			t.Fatal(err)
		}
		if d := compare(t, c.Image, readRGBPNG(t, g.Want)); d.differ != 0 {
			t.Fatalf("%s: %d samples differ from PIL", g.Name, d.differ)
		}
		if c.Width != g.Width || c.Height != g.Height || c.GridH*14 != c.Image.H || c.GridW*14 != c.Image.W ||
			c.NumImageTokens != c.GridH*c.GridW/4 || c.Format != g.Format {
			t.Errorf("%s: %+v", g.Name, c)
		}
		var png bytes.Buffer
		if err := c.Image.EncodePNG(&png); err != nil {
			t.Fatal(err)
		}
		img, format, err := Decode(png.Bytes(), 0)
		if err != nil || format != FormatPNG {
			t.Fatalf("%s: the PNG does not decode: %v", g.Name, err)
		}
		back, _ := ToRGB(img)
		if !bytes.Equal(back.Pix, c.Image.Pix) {
			t.Errorf("%s: EncodePNG changed the samples", g.Name)
		}
	}
	_, err := DefaultOptions().Canonical([]byte("not an image"))
	wantInputError(t, err, engine.CodeBadImage, "unrecognised")
	if err := (&RGB{}).EncodePNG(&bytes.Buffer{}); err == nil {
		t.Error("an empty image encoded")
	}
}
