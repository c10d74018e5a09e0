// Package imageproc turns encoded image bytes into the normalized patches LocateAnything's
// vision tower reads, reproducing the reference processor (PIL 9.4 + the HF processor's
// rescale) to the 8-bit pixel: decode with a pixel budget checked before decoding, PIL's
// convert("RGB"), the in_token_limit rescale and the stretch to multiples of 28 px with
// PIL's fixed-point bicubic, the optional squash onto the deployment's canonical grid,
// then normalization and patchify to [L, 3, 14, 14].
package imageproc

import (
	"context"
	"errors"
	"fmt"
	"image"
	"math"

	"github.com/locateanything/detect/engine"
)

// MaxGridSide is the first grid side (in patches) the vision tower refuses.
const MaxGridSide = 512

// Options are the processor's settings. Read them from the checkpoint's
// preprocessor_config.json; DefaultOptions holds the served deployment's values.
type Options struct {
	InTokenLimit int        // most patches before the rescale kicks in (1024 served, 25600 in the checkpoint)
	PatchSize    int        // 14
	MergeKernel  int        // 2: sizes are rounded up to PatchSize*MergeKernel
	Mean, Std    [3]float32 // per channel, applied to x/255
	MaxPixels    int64      // decode budget; <= 0 means DefaultMaxPixels
	CanonGrid    [2]int     // {h, w} in patches, both even; {0, 0} = native grid per image
}

// DefaultOptions is the validated deployment: limit 1024, mean = std = 0.5, and the
// canonical grid 24x44 derived from a 1920x1080 aspect.
func DefaultOptions() Options {
	return Options{
		InTokenLimit: 1024,
		PatchSize:    14,
		MergeKernel:  2,
		Mean:         [3]float32{0.5, 0.5, 0.5},
		Std:          [3]float32{0.5, 0.5, 0.5},
		MaxPixels:    DefaultMaxPixels,
		CanonGrid:    [2]int{24, 44},
	}
}

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	switch {
	case o.InTokenLimit <= 0:
		return fmt.Errorf("in_token_limit %d must be positive", o.InTokenLimit)
	case o.PatchSize <= 0 || o.MergeKernel <= 0:
		return fmt.Errorf("patch size %d and merge kernel %d must be positive", o.PatchSize, o.MergeKernel)
	}
	for c, s := range o.Std {
		if s == 0 || math.IsNaN(float64(s)) || math.IsNaN(float64(o.Mean[c])) {
			return fmt.Errorf("channel %d: mean %v / std %v cannot normalize", c, o.Mean[c], s)
		}
	}
	if o.CanonGrid != [2]int{} {
		return checkGrid(o.CanonGrid, o.MergeKernel)
	}
	return nil
}

func checkGrid(g [2]int, merge int) error {
	for i, side := range g {
		name := [2]string{"height", "width"}[i]
		if side <= 0 || side%merge != 0 || side >= MaxGridSide {
			return fmt.Errorf("grid %s %d must be a positive multiple of %d below %d", name, side, merge, MaxGridSide)
		}
	}
	return nil
}

// NativeSize is the size the processor's rescale gives a w x h image: if it holds more
// than InTokenLimit whole patches it is scaled by sqrt(limit/patches) (truncated, as
// Python's int() does), then each side is rounded up to a multiple of PatchSize*MergeKernel.
// A grid side reaching MaxGridSide is an *engine.InputError (CodeImageTooLarge).
func (o Options) NativeSize(w, h int) (int, int, error) {
	rw, rh, _ := o.limitSize(w, h)
	side := o.PatchSize * o.MergeKernel
	tw, th := ceilTo(rw, side), ceilTo(rh, side)
	if tw == 0 || th == 0 || th/o.PatchSize >= MaxGridSide || tw/o.PatchSize >= MaxGridSide {
		return 0, 0, engine.InputErrorf(engine.CodeImageTooLarge,
			"a %dx%d image rescales to %dx%d, a %dx%d patch grid; each side must be 1..%d patches",
			w, h, tw, th, th/o.PatchSize, tw/o.PatchSize, MaxGridSide-1)
	}
	return tw, th, nil
}

// limitSize is the first step of the rescale: the size after the token-limit resize, and
// whether that resize happens at all.
func (o Options) limitSize(w, h int) (int, int, bool) {
	ps := o.PatchSize
	patches := (w / ps) * (h / ps)
	if patches <= o.InTokenLimit {
		return w, h, false
	}
	s := math.Sqrt(float64(o.InTokenLimit) / float64(patches))
	return int(float64(w) * s), int(float64(h) * s), true
}

func ceilTo(v, m int) int { return (v + m - 1) / m * m }

// Result is what the vision tower reads.
type Result struct {
	Patches       []float32 // [GridH*GridW, 3, PatchSize, PatchSize], row-major over the grid
	GridH, GridW  int       // in patches
	Width, Height int       // the size of the image the model sees (canonical size)
}

// ModelView is the 8-bit RGB image the model sees: the upstream to_rgb of img (ToRGB),
// the processor's two bicubic resizes (rescale to the token limit, stretch to multiples
// of 28) and, with a canonical grid, a third that squashes it onto the grid's size.
func ModelView(img image.Image, o Options) (*RGB, error) {
	return ModelViewContext(context.Background(), img, o)
}

// ModelViewContext is ModelView stopped by ctx: the conversion and the resizes give up at
// their next stripe of rows once ctx is done, with an error wrapping ctx.Err().
func ModelViewContext(ctx context.Context, img image.Image, o Options) (*RGB, error) {
	if m, ok := img.(*image.RGBA); ok && !m.Rect.Empty() {
		// A decoded JPEG: the first resize reads its pixels where they are, as RGB,
		// checking that each row it reads is opaque (ToRGB would blend one with alpha).
		b := m.Rect
		rgba := plane{pix: m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], w: b.Dx(), h: b.Dy(), stride: m.Stride, bpp: 4}
		if view, err := modelView(ctx, rgba, o); !errors.Is(err, errNotOpaque) {
			return view, err
		}
	}
	if err := canceled(ctx, "convert to RGB"); err != nil {
		return nil, err
	}
	rgb, err := ToRGB(img)
	if err != nil {
		return nil, &engine.InputError{Code: engine.CodeBadImage, Err: err}
	}
	return modelView(ctx, rgb.plane(), o)
}

// ModelViewRGB is ModelView for pixels already converted to RGB.
func ModelViewRGB(rgb *RGB, o Options) (*RGB, error) {
	if rgb == nil || rgb.W <= 0 || rgb.H <= 0 || len(rgb.Pix) != 3*rgb.W*rgb.H {
		return nil, fmt.Errorf("model view: image is empty or malformed")
	}
	return modelView(context.Background(), rgb.plane(), o)
}

func modelView(ctx context.Context, src plane, o Options) (*RGB, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("image options: %w", err)
	}
	tw, th, err := o.NativeSize(src.w, src.h)
	if err != nil {
		return nil, err
	}
	if rw, rh, scaled := o.limitSize(src.w, src.h); scaled {
		cur, err := resizePlane(ctx, src, rw, rh)
		if err != nil {
			return nil, fmt.Errorf("rescale to the token limit: %w", err)
		}
		src = cur.plane()
	}
	cur, err := resizePlane(ctx, src, tw, th)
	if err != nil {
		return nil, fmt.Errorf("stretch to multiples of %d: %w", o.PatchSize*o.MergeKernel, err)
	}
	if g := o.CanonGrid; g != [2]int{} {
		if cur, err = resizePlane(ctx, cur.plane(), g[1]*o.PatchSize, g[0]*o.PatchSize); err != nil {
			return nil, fmt.Errorf("squash onto the canonical grid: %w", err)
		}
	}
	return cur, nil
}

// Preprocess runs ModelView, then normalizes and patchifies.
func Preprocess(img image.Image, o Options) (*Result, error) {
	return PreprocessContext(context.Background(), img, o)
}

// PreprocessContext is Preprocess stopped by ctx (ModelViewContext).
func PreprocessContext(ctx context.Context, img image.Image, o Options) (*Result, error) {
	view, err := ModelViewContext(ctx, img, o)
	if err != nil {
		return nil, err
	}
	return Patchify(view, o)
}

// Patchify normalizes ((x/255 - mean)/std, in float32 as torchvision does) and lays the
// image out as [gh*gw, 3, p, p] patches in row-major grid order. The image sides must be
// multiples of the patch size (ModelView's output always is).
func Patchify(view *RGB, o Options) (*Result, error) {
	p := o.PatchSize
	if p <= 0 || view == nil || view.W%p != 0 || view.H%p != 0 || len(view.Pix) != 3*view.W*view.H {
		return nil, fmt.Errorf("patchify: image is not a whole number of %d-px patches", p)
	}
	gh, gw := view.H/p, view.W/p
	var lut [3][256]float32
	for c := range lut {
		for v := range lut[c] {
			lut[c][v] = (float32(v)/255 - o.Mean[c]) / o.Std[c]
		}
	}
	out := make([]float32, gh*gw*3*p*p)
	i := 0
	for gy := 0; gy < gh; gy++ {
		for gx := 0; gx < gw; gx++ {
			for c := 0; c < 3; c++ {
				table := &lut[c]
				for r := 0; r < p; r++ {
					row := view.Pix[3*((gy*p+r)*view.W+gx*p):]
					dst := out[i : i+p]
					for col := range dst {
						dst[col] = table[row[3*col+c]]
					}
					i += p
				}
			}
		}
	}
	return &Result{Patches: out, GridH: gh, GridW: gw, Width: view.W, Height: view.H}, nil
}
