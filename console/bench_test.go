package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/jobs"
)

// fill adds n results to batch b of x: every fifth failed, the others with two to four
// detections of five labels.
func fill(x *index, batch string, n int) {
	labels := []string{"red circle", "blue square", "green triangle", "person", "car"}
	now := time.Now().Add(-time.Hour)
	for i := range n {
		res := &jobs.Result{ID: fmt.Sprintf("%s-%07d", batch, i), Batch: batch, Status: jobs.StatusSucceeded, Attempt: 1,
			FinishedAt: now.Add(time.Duration(i) * time.Millisecond)}
		res.Width, res.Height = 1920, 1080
		if i%5 == 4 {
			res.Status, res.Error = jobs.StatusFailed, &jobs.ErrorInfo{Code: "bad_image", Message: "not an image"}
		} else {
			for k := range 2 + i%3 {
				res.Detections = append(res.Detections, engine.Detection{Label: labels[(i+k)%len(labels)],
					Score: float64((i*7+k*13)%100) / 100, Box: [4]float64{10, 20, 300, 400}})
			}
		}
		x.add(res, 900, uint64(i+1), now)
	}
}

// BenchmarkGalleryPage100k is one gallery page of 100 items out of a batch of 100,000
// results, filtered by a label and a score (the page's most common question), through
// the API handler: the scan, the page and its JSON.
func BenchmarkGalleryPage100k(b *testing.B) {
	c, err := New(Config{Mode: ModeOn}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	c.nats.Store(&backend{})
	fill(c.idx, "big", 100_000)
	for _, q := range []string{
		"per_page=100&page=500",
		"label=red+circle&min_score=0.5&per_page=100&page=10",
		"status=failed&code=bad_image&per_page=100&page=200",
	} {
		b.Run(q, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, apiPrefix+"batches/big/results?"+q, nil)
			for b.Loop() {
				w := httptest.NewRecorder()
				c.Handler().ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
