package worker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/internal/freeport"
)

// TestPredictImageURLAndTokenThroughTheWorker runs the real worker (the simulated chip on
// the bundled model) with LA_HTTP_IMAGE_URLS and LA_HTTP_TOKEN set and checks what the
// worker wires in: an image_url is read through the worker's own storage roots
// (LA_FILE_ROOTS: a file below them is answered, one outside is a 403), and the token
// guards /predict and the metrics port's /metrics, not the probes.
func TestPredictImageURLAndTokenThroughTheWorker(t *testing.T) {
	const token = "worker-token-0123456789"
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	images, err := filepath.Abs(testImages)
	if err != nil {
		t.Fatal(err)
	}
	cfg := singleMachineConfig(t, t.TempDir(), freeport.MustAddr(t))
	cfg.Engine.Backend, cfg.Sim.Speed = "sim", 20
	cfg.Weights.Dir = filepath.Join(root, "models", "tiny-shapes")
	cfg.HTTP.Addr, cfg.Observe.MetricsAddr = freeport.MustAddr(t), freeport.MustAddr(t)
	cfg.HTTP.ImageURLs, cfg.HTTP.Token = true, token
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Open: OpenEngine})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	base, metrics := "http://"+cfg.HTTP.Addr, "http://"+cfg.Observe.MetricsAddr
	waitHealthy(t, base) // /health needs no token

	send := func(method, url, auth, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	inRoot := `{"image_url": "file://` + filepath.Join(images, "dog.jpg") + `", "query": "dog"}`
	outside := `{"image_url": "file://` + filepath.Join(root, "go.mod") + `", "query": "dog"}`
	for _, c := range []struct {
		name, method, url, auth, body string
		code                          int
		want                          string
	}{
		{"image_url below LA_FILE_ROOTS", http.MethodPost, base + "/predict", token, inRoot, http.StatusOK, `"width":768,"height":576`},
		{"image_url outside LA_FILE_ROOTS", http.MethodPost, base + "/predict", token, outside, http.StatusForbidden, "outside the file roots"},
		{"/predict without the token", http.MethodPost, base + "/predict", "", inRoot, http.StatusUnauthorized, "LA_HTTP_TOKEN"},
		{"/info with another token", http.MethodGet, base + "/info", "other", "", http.StatusUnauthorized, "LA_HTTP_TOKEN"},
		{"/metrics without the token", http.MethodGet, metrics + "/metrics", "", "", http.StatusUnauthorized, "LA_HTTP_TOKEN"},
		{"/metrics with the token", http.MethodGet, metrics + "/metrics", token, "", http.StatusOK, "la_predict_requests_total"},
		{"/readyz on the metrics port", http.MethodGet, metrics + "/readyz", "", "", http.StatusOK, `"ok"`},
	} {
		code, body := send(c.method, c.url, c.auth, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %.300s; want %d with %q", c.name, code, body, c.code, c.want)
		}
	}
}
