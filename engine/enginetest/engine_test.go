package enginetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/png"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
)

// smallPNG is a real w x h PNG.
func smallPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngHeader is a PNG signature and IHDR chunk claiming w x h pixels, and nothing else.
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2
	chunk := append([]byte("IHDR"), ihdr...)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	b.Write(chunk)
	_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

func generate(t *testing.T, e *Engine, ctx context.Context, req engine.Request) (*engine.Prediction, error) {
	t.Helper()
	p, err := e.Prepare(ctx, req)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return e.Generate(ctx, p)
}

func TestInputErrorsCarryTheEngineCodes(t *testing.T) {
	e := New()
	img := smallPNG(t, 8, 6)
	for _, c := range []struct {
		code string
		req  engine.Request
	}{
		{engine.CodeBadImage, engine.Request{Image: []byte("not an image"), Query: "dog"}},
		{engine.CodeImageTooLarge, engine.Request{Image: pngHeader(100000, 100000), Query: "dog"}},
		{engine.CodeBadQuery, engine.Request{Image: img}},
		{engine.CodeBadTask, engine.Request{Image: img, Query: "dog", Task: "segment"}},
		{engine.CodeBadBudget, engine.Request{Image: img, Query: "dog", MaxNewTokens: 5000}},
	} {
		_, err := e.Prepare(context.Background(), c.req)
		if ie, ok := engine.AsInputError(err); !ok || ie.Code != c.code {
			t.Errorf("%s: err %v, want an InputError with that code", c.code, err)
		}
	}
}

func TestAnswerIsWhatGenerateReturns(t *testing.T) {
	e := New()
	req := engine.Request{Image: smallPNG(t, 80, 60), Query: "dog</c>" + NothingLabel + "</c>cat"}
	want, err := e.Answer(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := generate(t, e, context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Generate %+v\nAnswer   %+v", got, want)
	}
	if len(got.Detections) != 2 || got.Detections[0].Label != "dog" || got.Detections[1].Label != "cat" {
		t.Errorf("detections %+v, want dog and cat", got.Detections)
	}
	if n := len(e.Seen()); n != 1 {
		t.Errorf("Answer counted as a call: %d seen", n)
	}
}

func TestGateLetsAllowedCallsThroughAndHoldsTheRest(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 4)
	e := New()
	e.Release, e.Allowed, e.Started = release, 1, started
	img := smallPNG(t, 8, 6)

	if _, err := generate(t, e, context.Background(), engine.Request{Image: img, Query: "first"}); err != nil {
		t.Fatalf("the allowed call: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan error, 1)
	go func() { _, err := generate(t, e, ctx, engine.Request{Image: img, Query: "held"}); held <- err }()
	<-started
	if q := <-started; q != "held" {
		t.Fatalf("started %q", q)
	}
	cancel()
	if err := <-held; !errors.Is(err, context.Canceled) {
		t.Fatalf("held call: %v, want context.Canceled", err)
	}
	close(release)
	if _, err := generate(t, e, context.Background(), engine.Request{Image: img, Query: "after"}); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if got, want := e.Seen(), []string{"first", "held", "after"}; !slices.Equal(got, want) {
		t.Errorf("Seen %v, want %v", got, want)
	}
	if e.Calls("held") != 1 || e.Canceled() != 1 {
		t.Errorf("Calls(held) %d, Canceled %d; want 1, 1", e.Calls("held"), e.Canceled())
	}
	if a := e.Answers(); len(a) != 1 || a[sha256.Sum256(img)] != 2 {
		t.Errorf("Answers %v, want the one image answered twice (the canceled call not counted)", a)
	}
}

func TestDelayErrAndClose(t *testing.T) {
	boom := errors.New("device busy")
	var calls []string
	e := New()
	e.Delay, e.Err = time.Hour, boom
	e.OnCall = func(method, query string) { calls = append(calls, method+" "+query) }
	img := smallPNG(t, 8, 6)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := generate(t, e, ctx, engine.Request{Image: img, Query: "slow"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a ctx ending during Delay: %v", err)
	}
	e.Delay = 0 // the test's own goroutine: no call in flight
	if _, err := generate(t, e, context.Background(), engine.Request{Image: img, Query: "fails"}); !errors.Is(err, boom) {
		t.Fatalf("Err set: %v", err)
	}
	if err := e.Close(); err != nil || e.Closed() != 1 {
		t.Fatalf("Close: %v, Closed %d", err, e.Closed())
	}
	if _, err := generate(t, e, context.Background(), engine.Request{Image: img, Query: "late"}); err == nil {
		t.Fatal("Generate after Close succeeded")
	}
	want := []string{"Prepare slow", "Generate slow", "Prepare fails", "Generate fails", "Close ", "Prepare late", "Generate late"}
	if !slices.Equal(calls, want) {
		t.Errorf("OnCall saw %q, want %q", calls, want)
	}
	if n := len(e.Answers()); n != 0 {
		t.Errorf("%d images answered; every call failed", n)
	}
}
