package tinymodel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// TestHeldoutScenesThroughTheQueue pushes the held-out scenes through the whole system as
// jobs: embedded JetStream, the jobs.Runner, file storage, the chip owner, the C engine, the
// answer parser and the published results. Every result must say what PyTorch generated for
// that scene, and the single-category detections must reach the accuracy floors.
func TestHeldoutScenesThroughTheQueue(t *testing.T) {
	set := loadHeldout(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	var worker config.Worker // the worker's defaults
	if err := envconfig.Process("", &worker); err != nil {
		t.Fatal(err)
	}
	topo, err := jobs.EnsureTopology(ctx, js, worker.Topology)
	if err != nil {
		t.Fatal(err)
	}
	images, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	store, err := storage.Open(storage.Config{FileRoots: []string{images, out}, MaxImageBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c, err := chip.Open(func() (engine.Engine, error) {
		return pipeline.Open(pipeline.OpenOptions{
			Settings:   engine.Settings{Backend: "cpu", Threads: 1, MaxSeqLen: 512, MaxBatch: 1, CanonGrid: "native", MaxNewTokens: set.MaxNewTokens, MaxNewTokensCap: set.MaxNewTokens},
			WeightsDir: checkpointDir,
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := worker.RunnerConfig("tiny", 0)
	rc.DefaultOutput, rc.PollWait = "file://"+out+"/", 200*time.Millisecond
	rc.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	runner, err := jobs.NewRunner(topo, store, c, rc)
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- runner.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Error(err)
		}
	}()

	results, err := js.OrderedConsumer(ctx, jobs.ResultsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]heldoutScene{}
	for i, sc := range set.Scenes {
		id := fmt.Sprintf("heldout-%02d", i)
		byID[id] = sc
		job, _ := json.Marshal(jobs.Job{ID: id, Image: "file://" + filepath.Join(images, sc.File),
			Query: sc.Query, Task: engine.Task(sc.Task), MaxNewTokens: set.MaxNewTokens, Batch: "heldout"})
		if _, err := js.Publish(ctx, jobs.JobSubject(jobs.DefaultClass), job, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}

	var tally shapes.Tally
	for range set.Scenes {
		msg, err := results.Next(jetstream.FetchMaxWait(2 * time.Minute))
		if err != nil {
			t.Fatalf("waiting for results: %v", err)
		}
		var r jobs.Result
		if err := json.Unmarshal(msg.Data(), &r); err != nil {
			t.Fatal(err)
		}
		sc, ok := byID[r.ID]
		if !ok {
			t.Fatalf("result for unknown job %q", r.ID)
		}
		delete(byID, r.ID)
		if r.Status != jobs.StatusSucceeded {
			t.Fatalf("%s: %s %+v", r.ID, r.Status, r.Error)
		}
		if r.RawText != sc.TorchText {
			t.Errorf("%s (%s %q): result says %q, PyTorch generated %q", r.ID, sc.Task, sc.Query, r.RawText, sc.TorchText)
		}
		if sc.Kind == detectKindToCheck {
			tally.Add(truthBoxes(sc.Truth), normBoxes(r.Detections))
		}
	}
	assertFloors(t, "through the queue", tally)
}
