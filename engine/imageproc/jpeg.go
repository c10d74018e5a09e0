package imageproc

import (
	"context"
	"fmt"
	"image"

	"github.com/locateanything/detect/engine/imageproc/internal/libjpeg"
)

// JPEG goes through the system libjpeg-turbo, the library PIL decodes with, under PIL's
// settings (internal/libjpeg): the pixels are PIL's to the sample. What PIL's
// JpegImagePlugin adds on top is reproduced here:
//
//   - 1 component opens as "L", 3 as "RGB" (libjpeg converts YCbCr, or passes RGB, by the
//     file's JFIF / Adobe markers), 4 as "CMYK"; 8-bit samples only;
//   - CMYK (and YCCK, which libjpeg turns into CMYK) is unpacked as "CMYK;I", that is
//     inverted, whether or not the file has an Adobe marker: PIL assumes Adobe's
//     convention for every 4-component JPEG. ToRGB then applies PIL's CMYK -> RGB.
//   - a truncated file is an error (PIL: "image file is truncated"), and so is an entropy
//     segment cut short by a marker, which PIL would decode to a grey tail.

func jpegConfig(data []byte) (image.Config, error) {
	h, err := libjpeg.ReadHeader(data)
	if err != nil {
		return image.Config{}, err
	}
	if err := jpegSupported(h); err != nil {
		return image.Config{}, err
	}
	return image.Config{Width: h.Width, Height: h.Height}, nil
}

// jpegSupported refuses what PIL's JPEG plugin refuses when it opens the file.
func jpegSupported(h libjpeg.Header) error {
	if h.Precision != 8 {
		return fmt.Errorf("%d-bit samples (PIL opens 8-bit JPEG only)", h.Precision)
	}
	if h.BytesPerPixel() == 0 {
		return fmt.Errorf("%d components (PIL opens 1, 3 or 4)", h.Components)
	}
	return nil
}

func decodeJPEG(ctx context.Context, data []byte, _ image.Config) (image.Image, error) {
	h, err := libjpeg.ReadHeader(data)
	if err != nil {
		return nil, err
	}
	if err := jpegSupported(h); err != nil {
		return nil, err
	}
	r := image.Rect(0, 0, h.Width, h.Height)
	switch h.Components {
	case 1:
		m := image.NewGray(r)
		return m, libjpeg.DecodeContext(ctx, data, h, m.Pix, m.Stride)
	case 3:
		m := image.NewRGBA(r) // libjpeg writes alpha 255
		return m, libjpeg.DecodeContext(ctx, data, h, m.Pix, m.Stride)
	default:
		m := image.NewCMYK(r)
		if err := libjpeg.DecodeContext(ctx, data, h, m.Pix, m.Stride); err != nil {
			return nil, err
		}
		for i, v := range m.Pix { // PIL's "CMYK;I" unpacker
			m.Pix[i] = 255 - v
		}
		return m, nil
	}
}
