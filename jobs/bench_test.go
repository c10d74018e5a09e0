package jobs

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage"
)

// BenchmarkRunnerOverhead measures what the job path costs around the engine: pull,
// state reads and writes, image fetch, result store and publish, ack, with local files for
// storage and an embedded NATS server. engine=0ms is the bare overhead; with engine=10ms
// (the double's Delay) prefetch=2 should hide most of it behind the device time. One op is
// one job.
func BenchmarkRunnerOverhead(b *testing.B) {
	for _, tc := range []struct{ prefetch, engineMS int }{{1, 0}, {2, 0}, {1, 10}, {2, 10}} {
		prefetch := tc.prefetch
		b.Run(fmt.Sprintf("prefetch=%d/engine=%dms", tc.prefetch, tc.engineMS), func(b *testing.B) {
			dir := b.TempDir()
			img, err := os.ReadFile("testdata/dog.jpg")
			if err != nil {
				b.Fatal(err)
			}
			imgPath := filepath.Join(dir, "dog.jpg")
			if err := os.WriteFile(imgPath, img, 0o644); err != nil {
				b.Fatal(err)
			}
			store, err := storage.Open(storage.Config{FileRoots: []string{dir}, MaxImageBytes: 32 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			s := natstest.Start(b)
			js, topo := connectTopology(b, s, TopologyConfig{})
			cfg := RunnerConfig{Worker: "bench", Prefetch: prefetch, DefaultOutput: "file://" + dir + "/out/",
				RunnerTiming: RunnerTiming{PollWait: 100 * time.Millisecond, Grace: 10 * time.Second, RetryDelay: time.Second,
					RetryDelayMax: time.Minute, OpTimeout: 10 * time.Second},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if err := os.Mkdir(filepath.Join(dir, "out"), 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				data, _ := json.Marshal(Job{ID: fmt.Sprintf("b-%d", i), Image: "file://" + imgPath, Query: "dog"})
				if _, err := js.PublishAsync(JobSubject(DefaultClass), data); err != nil {
					b.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()

			b.ResetTimer()
			start := time.Now()
			eng := enginetest.New()
			eng.Delay = time.Duration(tc.engineMS) * time.Millisecond
			r := startRunner(b, topo, store, eng, cfg)
			testwait.Until(b, 10*time.Minute, "every job's result", func() bool {
				info, err := topo.Results.Info(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				return info.State.Msgs >= uint64(b.N)
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			r.stop(b)
		})
	}
}
