package loadtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
)

// browser is what an open console page asks of the worker while a batch runs (--console):
// every tick the overview, the batches and the first gallery page of the batch, and the
// thumbnail of each item on that page once (a browser keeps the images it loaded).
type browser struct {
	base  string // http://host:port
	batch string
	every time.Duration

	mu       sync.Mutex
	requests int
	failures int
	busy     time.Duration // time spent waiting for answers
}

// run polls until ctx ends.
func (b *browser) run(ctx context.Context) {
	client := &http.Client{Timeout: 30 * time.Second}
	thumbs := map[string]bool{}
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		b.get(ctx, client, "/console/api/overview", nil)
		b.get(ctx, client, "/console/api/batches", nil)
		var page struct {
			Items []struct {
				Thumb string `json:"thumb"`
			} `json:"items"`
		}
		b.get(ctx, client, "/console/api/batches/"+b.batch+"/results?per_page=100&page=1", &page)
		for _, it := range page.Items {
			if !thumbs[it.Thumb] {
				thumbs[it.Thumb] = true
				b.get(ctx, client, it.Thumb, nil)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// get asks for path and decodes a JSON answer into v when v is not nil.
func (b *browser) get(ctx context.Context, client *http.Client, path string, v any) {
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	ok := false
	defer func() {
		if ctx.Err() != nil {
			return // cut short by the end of the run, not an answer
		}
		b.mu.Lock()
		b.requests++
		b.busy += time.Since(start)
		if !ok {
			b.failures++
		}
		b.mu.Unlock()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if v != nil {
		err = json.NewDecoder(resp.Body).Decode(v)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	ok = err == nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound) // a batch not yet indexed is 404
}

// summary is the requests made, those that failed and their mean time.
func (b *browser) summary() (requests, failures int, meanMS float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.requests > 0 {
		meanMS = ms(b.busy) / float64(b.requests)
	}
	return b.requests, b.failures, meanMS
}
