package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/storage"
)

// TestPictureErrorAnswers: a thumbnail whose turn did not come in time is 503 with
// Retry-After and no warning in the log; a request the browser abandoned gets no answer
// and no warning; a missing picture stays 404 and a storage failure 502 with a warning.
func TestPictureErrorAnswers(t *testing.T) {
	var logged bytes.Buffer
	c := &Console{log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name       string
		url        string
		ctx        context.Context
		err        error
		status     int
		retryAfter string
		warns      bool
	}{
		{"thumbnail not made in time", "/console/api/pictures/a?size=thumb", context.Background(),
			fmt.Errorf("waiting to make a thumbnail: %w: %w", errThumbNotReady, context.DeadlineExceeded), http.StatusServiceUnavailable, thumbRetryAfter, false},
		{"storage timed out", "/console/api/pictures/a?size=thumb", context.Background(),
			fmt.Errorf("read: %w", context.DeadlineExceeded), http.StatusBadGateway, "", true},
		{"browser went away", "/console/api/pictures/a?size=thumb", gone,
			fmt.Errorf("making a thumbnail: %w", context.Canceled), http.StatusOK, "", false},
		{"not there", "/console/api/pictures/a", context.Background(),
			fmt.Errorf("read: %w", storage.ErrNotFound), http.StatusNotFound, "", false},
		{"storage failed", "/console/api/pictures/a", context.Background(),
			fmt.Errorf("read: connection refused"), http.StatusBadGateway, "", true},
	} {
		logged.Reset()
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, tc.url, nil).WithContext(tc.ctx)
		c.pictureError(w, r, "a", tc.err)
		if w.Code != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, w.Code, tc.status, w.Body)
		}
		if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tc.name, got, tc.retryAfter)
		}
		if warned := strings.Contains(logged.String(), "level=WARN"); warned != tc.warns {
			t.Errorf("%s: warned %v, want %v: %s", tc.name, warned, tc.warns, logged.String())
		}
		if tc.status == http.StatusOK && w.Body.Len() != 0 {
			t.Errorf("%s: answered %q to a browser that went away", tc.name, w.Body)
		}
	}
}

// TestThumbnailTurnIsShort: a thumbnail request that cannot get its turn (another is being
// made) gives up after thumbTurn with errThumbNotReady, long before its request's time.
func TestThumbnailTurnIsShort(t *testing.T) {
	c := &Console{thumbs: make(chan struct{}, 1), thumbTurn: 50 * time.Millisecond}
	c.thumbs <- struct{}{} // another thumbnail holds the turn
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.thumbnail(ctx, picture{src: "file:///elsewhere.png"})
	if !errors.Is(err, errThumbNotReady) {
		t.Fatalf("got %v, want errThumbNotReady", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("gave up only when the request's time ran out")
	}
}
