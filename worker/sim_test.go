package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

// TestWorkerOnTheSimulatedChip runs the real service with LA_ENGINE=sim on two simulated
// chips of four slots each: queued jobs with overlays all succeed, each answers one label
// per category, every answer is the one the simulated chip gives the same request alone
// (batching and the chip it ran on change nothing), the device time is metered, and
// /info describes the simulated chip.
func TestWorkerOnTheSimulatedChip(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cfg := singleMachineConfig(t, dataDir, freeport.MustAddr(t))
	cfg.Engine.Backend, cfg.Engine.Chips, cfg.Engine.MaxBatch, cfg.Runner.Prefetch = "sim", 2, 4, 6
	cfg.Sim.Speed = 20 // about 50 ms a request
	cfg.Weights.Dir = filepath.Join(root, "models", "tiny-shapes")
	cfg.HTTP.Addr = freeport.MustAddr(t)

	meters := []*sim.Meter{{}, {}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- Run(ctx, cfg, Options{Log: log, Open: MeteredOpener(meters)}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	base := "http://" + cfg.HTTP.Addr
	waitHealthy(t, base)
	var info struct {
		Hardware string
		Limits   struct {
			CanonicalGrid [2]int `json:"canonical_grid"`
		}
		Worker struct {
			Backend   string
			Simulated bool
		}
	}
	getJSON(t, base+"/info", &info)
	if info.Worker.Backend != "sim" || info.Hardware != "simulated Blackhole p150a" || info.Limits.CanonicalGrid != [2]int{24, 44} || !info.Worker.Simulated {
		t.Errorf("/info: backend %q hardware %q grid %v simulated %v; want the simulated p150a on the 24x44 grid, said to be simulated",
			info.Worker.Backend, info.Hardware, info.Limits.CanonicalGrid, info.Worker.Simulated)
	}

	js := publisher(t, cfg.Embedded.Listen)
	type job struct{ image, query string }
	var sent []job
	for round := range 2 {
		for _, image := range []string{"dog.jpg", "person.jpg"} {
			for _, query := range []string{"dog</c>person", "kite</c>tree</c>car"} {
				j := job{image, query}
				sent = append(sent, j)
				path, _ := filepath.Abs(filepath.Join(testImages, image))
				id := fmt.Sprintf("sim-%d-%d", round, len(sent))
				b, _ := json.Marshal(jobs.Job{ID: id, Image: "file://" + path, Query: query, Overlay: true})
				if _, err := js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b, jetstream.WithMsgID(id)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	results := map[job]jobs.Result{}
	for i, j := range sent {
		id := fmt.Sprintf("sim-%d-%d", i/4, i+1)
		var r jobs.Result
		testwait.Until(t, 2*time.Minute, "result "+id, func() bool {
			var ok bool
			r, ok = readResult(t, dataDir, id)
			return ok
		})
		if r.Status != jobs.StatusSucceeded || r.OverlayURL == nil {
			t.Fatalf("%s: status %s, error %+v, overlay %v", id, r.Status, r.Error, r.OverlayURL)
		}
		if !r.Simulated {
			t.Errorf("%s: the simulated chip's result is not marked simulated", id)
		}
		var labels []string
		for _, d := range r.Detections {
			if !slices.Contains(labels, d.Label) {
				labels = append(labels, d.Label)
			}
		}
		if want := strings.Split(j.query, "</c>"); !slices.Equal(labels, want) {
			t.Errorf("%s: labels %v, want %v (%q)", id, labels, want, r.RawText)
		}
		if earlier, ok := results[j]; ok && earlier.RawText != r.RawText {
			t.Errorf("%s %q answered twice differently: %q and %q", j.image, j.query, earlier.RawText, r.RawText)
		}
		results[j] = r
	}

	// The same requests, alone on a one-slot simulated chip opened here.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	alone := cfg
	alone.Engine.MaxBatch, alone.Sim.Speed = 1, 1000
	eng, err := OpenEngine(context.Background(), alone, 0, log)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for j, r := range results {
		img, err := os.ReadFile(filepath.Join(testImages, j.image))
		if err != nil {
			t.Fatal(err)
		}
		prep, err := eng.Prepare(context.Background(), engine.Request{Image: img, Query: j.query})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := eng.Generate(context.Background(), prep)
		if err != nil {
			t.Fatal(err)
		}
		if pred.RawText != r.RawText {
			t.Errorf("%s %q: the worker answered %q, the chip alone %q", j.image, j.query, r.RawText, pred.RawText)
		}
	}

	var seqs int64
	for i, m := range meters {
		got := m.Read()
		seqs += got.Sequences
		if got.Busy <= 0 {
			t.Errorf("chip %d: no device time metered", i)
		}
	}
	if seqs != int64(len(sent)) {
		t.Errorf("the meters counted %d sequences for %d jobs", seqs, len(sent))
	}
}

// getJSON decodes the JSON body of a GET.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
