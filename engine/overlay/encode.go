package overlay

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"sync"
)

// Encoder writes PNGs with the fastest zlib level and reuses its compression state and
// output buffers between calls. One Encoder may be shared by many goroutines.
type Encoder struct {
	png  png.Encoder
	bufs sync.Pool // *bytes.Buffer
}

// NewEncoder returns an Encoder tuned for speed (png.BestSpeed).
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.png.CompressionLevel = png.BestSpeed
	e.png.BufferPool = &encoderBuffers{}
	return e
}

// encoderBuffers is the png.EncoderBufferPool of one Encoder.
type encoderBuffers struct{ pool sync.Pool }

func (p *encoderBuffers) Get() *png.EncoderBuffer {
	b, _ := p.pool.Get().(*png.EncoderBuffer)
	return b
}

func (p *encoderBuffers) Put(b *png.EncoderBuffer) { p.pool.Put(b) }

// EncodePNG encodes img as PNG and returns a slice the caller owns.
func (e *Encoder) EncodePNG(img image.Image) ([]byte, error) {
	if img == nil || img.Bounds().Empty() {
		return nil, fmt.Errorf("encode overlay PNG: image is empty")
	}
	buf, _ := e.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer func() {
		buf.Reset()
		e.bufs.Put(buf)
	}()
	if err := e.png.Encode(buf, img); err != nil {
		return nil, fmt.Errorf("encode overlay PNG %dx%d: %w", img.Bounds().Dx(), img.Bounds().Dy(), err)
	}
	return bytes.Clone(buf.Bytes()), nil
}
