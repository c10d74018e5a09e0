package imageproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
)

// Decoding a 40-megapixel PNG takes seconds; a job cancelled, past its deadline or cut off
// by a shutdown must not wait for it. Go's decoders have no context, but they read their
// input as they go, so they are stopped through it: ctxReader fails once ctx is done, and
// the decoder returns that error from its next read. The resize loops check ctx between
// stripes of rows, libjpeg between stripes of scanlines (internal/libjpeg).

// ctxReader reads data until ctx is done, then returns ctx's error.
type ctxReader struct {
	ctx context.Context
	r   *bytes.Reader
}

func newCtxReader(ctx context.Context, data []byte) io.Reader {
	return &ctxReader{ctx: ctx, r: bytes.NewReader(data)}
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// stripeRows is how many rows a resize pass works through between looks at its context.
const stripeRows = 64

// canceled is ctx's error as the reason a step stopped, or nil while ctx is live. It is
// never an *engine.InputError: the image is not at fault.
func canceled(ctx context.Context, step string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s stopped: %w", step, err)
	}
	return nil
}
