package imageproc

import (
	"fmt"
	"image"
	"image/png"
	"io"
)

// Canonical is the image the model sees for encoded bytes, with its sizes: what
// `worker preprocess` writes and reports.
type Canonical struct {
	Image          *RGB   // after decode, to_rgb and every resize, before normalisation
	Format         string // as Decode names it
	Width, Height  int    // the decoded image
	GridH, GridW   int    // in patches
	NumImageTokens int    // GridH*GridW / MergeKernel^2: the <IMG_CONTEXT> slots of the prompt
}

// Canonical decodes data (Options.Decode: the pixel budget and the grid are checked from
// the header) and computes the image the model sees under o (ModelView).
func (o Options) Canonical(data []byte) (*Canonical, error) {
	img, format, err := o.Decode(data)
	if err != nil {
		return nil, err
	}
	view, err := ModelView(img, o)
	if err != nil {
		return nil, err
	}
	b := img.Bounds()
	gh, gw := view.H/o.PatchSize, view.W/o.PatchSize
	return &Canonical{
		Image: view, Format: format, Width: b.Dx(), Height: b.Dy(),
		GridH: gh, GridW: gw, NumImageTokens: gh * gw / (o.MergeKernel * o.MergeKernel),
	}, nil
}

// EncodePNG writes the image as an 8-bit RGB PNG, compressed for speed.
func (r *RGB) EncodePNG(w io.Writer) error {
	if r == nil || r.W <= 0 || r.H <= 0 || len(r.Pix) != 3*r.W*r.H {
		return fmt.Errorf("png: image is empty or malformed")
	}
	m := image.NewRGBA(image.Rect(0, 0, r.W, r.H)) // opaque: image/png writes it as RGB
	for i, j := 0, 0; i < len(r.Pix); i, j = i+3, j+4 {
		m.Pix[j], m.Pix[j+1], m.Pix[j+2], m.Pix[j+3] = r.Pix[i], r.Pix[i+1], r.Pix[i+2], 0xFF
	}
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	return enc.Encode(w, m)
}
