package httpcompat

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/imagemem"
	"github.com/locateanything/detect/internal/testimage"
	"github.com/locateanything/detect/internal/testwait"
)

// bigPNG is a 6000x6000 16-bit RGB header: 36 megapixels at 8 bytes decoded plus 4 of
// Prepare's working copies.
var bigPNG = testimage.PNGHeader(6000, 6000, 16, 2, 0)

const bigCost = 6000*6000*(8+imagemem.PrepareBytesPerPixel) + 33 // 33: the header's own bytes

func TestLargeImagesWaitForTheMemoryBudgetAndSmallOnesPass(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 16)
	const budget = 1_000_000_000 // two large images, not three
	h := newHarness(t, setup{
		cfg:       Config{MaxDecodedBytes: budget},
		configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started },
	})
	big := base64.StdEncoding.EncodeToString(bigPNG)
	const larges = 4
	var replies []<-chan string
	for i := range larges {
		replies = append(replies, asyncPredict(t.Context(), h.url, big, fmt.Sprintf("big-%d", i)))
	}
	<-started // one on the chip, one waiting for it, two waiting for memory
	testwait.Until(t, time.Minute, "two large images admitted and two waiting", func() bool {
		used, waiting := inUse(h.srv.memory)
		return used == 2*bigCost && waiting == larges-2 && h.chip.Waiting() == 1
	})
	replies = append(replies, asyncPredict(t.Context(), h.url, dogB64(t), "small"))
	waitQueued(t, h.chip, 2) // the photo reached the chip past the large images waiting for memory
	if used, waiting := inUse(h.srv.memory); used > budget || waiting != larges-2 {
		t.Fatalf("in use %d (budget %d), waiting %d", used, budget, waiting)
	}
	close(release)
	for _, r := range replies {
		if got := <-r; !strings.HasPrefix(got, "200 ") {
			t.Errorf("got %q, want 200", got)
		}
	}
	waitBudgetFree(t, h)
}

// waitBudgetFree waits until every reservation is released: the handlers return just after
// their answers are written.
func waitBudgetFree(t *testing.T, h *harness) {
	t.Helper()
	testwait.Until(t, time.Minute, "the memory budget to be free", func() bool {
		used, waiting := inUse(h.srv.memory)
		return used == 0 && waiting == 0 && h.srv.pending.Load() == 0
	})
}

func TestImageOverTheWholeMemoryBudgetIs413(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{MaxDecodedBytes: 100 << 20}})
	status, body := h.predict(t, map[string]any{"image": base64.StdEncoding.EncodeToString(bigPNG), "query": "dog"})
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d %s, want 413", status, body)
	}
	if d := detailString(t, body); !strings.Contains(d, "6000x6000") || !strings.Contains(d, "LA_HTTP_MAX_DECODED_BYTES") {
		t.Fatalf("detail %q should give the size and name LA_HTTP_MAX_DECODED_BYTES", d)
	}
	if status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog"}); status != http.StatusOK {
		t.Fatalf("an ordinary photo after it: %d %s", status, body)
	}
	if n := len(h.eng.Seen()); n != 1 {
		t.Fatalf("%d requests reached the chip, want the photo alone", n)
	}
	waitBudgetFree(t, h)
}

// holdInPrepare makes the request with query "holder" stop inside Prepare, its memory
// reserved, until the returned func is called.
func holdInPrepare(e *enginetest.Engine) (unblock func()) {
	gate := make(chan struct{})
	e.OnCall = func(method, query string) {
		if method == "Prepare" && query == "holder" {
			<-gate
		}
	}
	return sync.OnceFunc(func() { close(gate) })
}

func TestMemoryWaitEndsIn503OrWhenTheClientLeaves(t *testing.T) {
	var unblock func()
	gone := &messageSignal{msg: "predict: client went away", seen: make(chan struct{}, 4)}
	h := newHarness(t, setup{
		cfg:       Config{MaxDecodedBytes: bigCost, WriteTimeout: time.Second},
		opts:      Options{Logger: slog.New(gone)},
		configure: func(e *enginetest.Engine) { unblock = holdInPrepare(e) },
	})
	defer unblock()
	big := base64.StdEncoding.EncodeToString(bigPNG)
	holder := asyncPredict(t.Context(), h.url, big, "holder")
	testwait.Until(t, time.Minute, "the holder to reserve", func() bool { used, _ := inUse(h.srv.memory); return used == bigCost })

	ctx, hangUp := context.WithCancel(t.Context())
	leaving := asyncPredict(ctx, h.url, big, "leaving")
	testwait.Until(t, time.Minute, "a request to wait for memory", func() bool { _, n := inUse(h.srv.memory); return n == 1 })
	hangUp()
	<-gone.seen
	if got := <-leaving; !strings.HasPrefix(got, "error:") {
		t.Fatalf("the client hung up, yet got %q", got)
	}

	status, body := h.predict(t, map[string]any{"image": big, "query": "late"})
	if status != http.StatusServiceUnavailable || !strings.Contains(detailString(t, body), "LA_HTTP_MAX_DECODED_BYTES") {
		t.Fatalf("a request that waited past its deadline for memory: %d %s, want 503 naming LA_HTTP_MAX_DECODED_BYTES", status, body)
	}
	unblock()
	<-holder
	waitBudgetFree(t, h)
	if n := len(h.eng.Seen()); n != 0 {
		t.Fatalf("%d requests reached the chip; the holder ran out of time and the others never had memory", n)
	}
}

// TestMemoryBudgetIsReleasedAfterManyRequests: whatever way a request ends (answered,
// refused by the engine, failed on the device, its overlay failing) its reservation comes
// back, and a crowd of large images over the budget is served one after another.
func TestMemoryBudgetIsReleasedAfterManyRequests(t *testing.T) {
	h := newHarness(t, setup{
		cfg:       Config{MaxDecodedBytes: 6000*6000*(8+imagemem.OverlayBytesPerPixel) + 10<<20}, // one large image at a time
		configure: func(e *enginetest.Engine) { e.Description.MaxSeqLen = 1500 },
	})
	big := base64.StdEncoding.EncodeToString(bigPNG)
	small := dogB64(t)
	var wg sync.WaitGroup
	results := make(chan string, 100)
	for i := range 40 {
		wg.Go(func() {
			body := map[string]any{"image": big, "query": fmt.Sprintf("big-%d", i)}
			switch i % 4 {
			case 1:
				body["image"] = small
			case 2:
				body["return_overlay"] = true // the double cannot draw on a bare header: 500
			case 3:
				body["query"] = strings.Repeat("d", 900) // Prepare refuses it: prompt + budget over 1500
				body["max_new_tokens"] = 1024
			}
			status, _ := postPredict(t, t.Context(), h.url, body)
			results <- fmt.Sprint(i%4, " ", status)
		})
	}
	wg.Wait()
	close(results)
	counts := map[string]int{}
	for r := range results {
		counts[r]++
	}
	want := map[string]int{"0 200": 10, "1 200": 10, "2 500": 10, "3 400": 10}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("outcomes %v, want %v", counts, want)
	}
	waitBudgetFree(t, h)
}

// inUse is what the budget holds and how many wait for it.
func inUse(b *imagemem.Budget) (used int64, waiting int) {
	s := b.Stats()
	return s.Used, s.Waiting
}
