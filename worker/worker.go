// Package worker assembles the service that cmd/worker runs: the /predict server, one engine
// and one job Runner per chip, metrics, the NATS connection (or the embedded server) and the
// JetStream topology, started in the lifecycle's order and stopped in reverse
// (docs/worker.md, "Lifecycle").
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/console"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/httpcompat"
	"github.com/locateanything/detect/internal/bearer"
	"github.com/locateanything/detect/internal/imagemem"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsconn"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/storage"
)

// EngineOpener opens the engine of one chip on the calling thread (the chip's owner).
// OpenEngine in production, a test double in tests.
type EngineOpener func(ctx context.Context, cfg config.Worker, chip int, log *slog.Logger) (engine.Engine, error)

// Options are what Run needs besides the configuration.
type Options struct {
	Log *slog.Logger // the process logger
	// Landmarks receives the start-up lines the tt-model launcher watches (stdout in main;
	// nil discards them).
	Landmarks io.Writer
	Open      EngineOpener
}

// service is one run of the worker: what each lifecycle phase built, for the next phases
// and for the stop, which undoes them in reverse.
type service struct {
	cfg  config.Worker
	log  *slog.Logger
	opts Options

	wg     sync.WaitGroup     // every goroutine started here
	runCtx context.Context    // ends when the worker stops
	stop   context.CancelFunc // ends runCtx

	store          *storage.Router
	predict        *httpcompat.Server
	console        *console.Console // nil when the console is not served
	chips          []*chip.Chip
	nc             *nats.Conn
	embedded       *natsembed.Server
	topo           *jobs.Topology
	healer         *jobs.Healer         // recreates what vanishes of topo
	reg            *prometheus.Registry // nil when metrics are off
	metrics        *jobs.Metrics        // nil when metrics are off
	predictMetrics *httpcompat.Metrics  // nil when metrics are off
	traces         *sdktrace.TracerProvider
	tracer         trace.Tracer // nil when traces are off
	runners        []*jobs.Runner
	runErrs        []error
	ready          atomic.Bool // every phase done: /readyz may say ok
	unlockDataDir  func()      // nil until lockDataDir took LA_DATA_DIR
}

// Run runs the worker until ctx ends (SIGTERM or SIGINT in main), then drains: the Runners
// stop pulling, finish what they hold within LA_GRACE and give back the rest; every
// goroutine started here has stopped when it returns. It returns nil after a clean drain
// and an error when the worker cannot start.
func Run(ctx context.Context, cfg config.Worker, opts Options) (err error) {
	if opts.Landmarks == nil {
		opts.Landmarks = io.Discard
	}
	if cfg.Runner.WorkerName == "" {
		cfg.Runner.WorkerName = config.HostWorkerName(strconv.Itoa(os.Getpid()))
	}
	s := &service{cfg: cfg, opts: opts, log: opts.Log.With("worker", cfg.Runner.WorkerName)}
	s.runCtx, s.stop = context.WithCancel(ctx)
	defer s.close()

	// The tt-model launcher watches for uvicorn's landmark lines: exactly one of "startup
	// complete" or "startup failed".
	if err := s.start(ctx); err != nil {
		_ = httpcompat.StartupFailed(opts.Landmarks, err)
		return err
	}
	if err := httpcompat.StartupComplete(opts.Landmarks); err != nil {
		return err
	}

	<-ctx.Done()
	s.log.Info("stopping: finishing held jobs", "grace", cfg.Runner.Grace)
	s.stop()
	s.wg.Wait()
	if err := errors.Join(s.runErrs...); err != nil {
		return err
	}
	s.log.Info("worker stopped")
	return nil
}

// start runs the start-up phases in order (docs/worker.md, "Lifecycle").
func (s *service) start(ctx context.Context) error {
	phases := []func(context.Context) error{
		s.checkDevice,    // 0. the chip is there (LA_ENGINE=ttnn), before anything is written
		s.lockDataDir,    // 1. LA_DATA_DIR is this worker's alone
		s.observe,        //    the metrics registry and the trace exporter
		s.openStorage,    // 2. storage
		s.servePredict,   //    /predict answers "starting"
		s.openChips,      //    one engine per chip
		s.serveMetrics,   // 3. metrics
		s.connectQueue,   //    NATS and the topology
		s.startRunners,   //    the dead-letter watcher and one Runner per chip
		s.startConsole,   //    the heartbeats and the console's index
		s.predictIsReady, //   /health says "ok"
		s.markReady,      //   /readyz says "ok" while NATS is connected
	}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return nil
}

// checkDevice is CheckDevice: a host without the chip LA_ENGINE names stops here, before
// LA_DATA_DIR, storage or the weights are touched.
func (s *service) checkDevice(context.Context) error { return CheckDevice(s.cfg) }

// close undoes what start did, in reverse: goroutines, NATS, chips, storage.
func (s *service) close() {
	s.stop()
	s.wg.Wait()
	if s.nc != nil {
		s.nc.Close()
	}
	if s.embedded != nil {
		s.embedded.Shutdown()
	}
	for i, c := range s.chips {
		if err := c.Close(); err != nil {
			s.log.Error("closing chip", "chip", i, "err", err)
		}
	}
	if s.store != nil {
		_ = s.store.Close()
	}
	if s.traces != nil { // after the rest, so the spans of the drain go out too
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.traces.Shutdown(ctx); err != nil {
			s.log.Warn("flushing traces", "err", err)
		}
		cancel()
	}
	if s.unlockDataDir != nil { // last: the next worker may open the store once it is closed
		s.unlockDataDir()
	}
}

// observe creates what the later phases record into: the metrics registry with the job
// and /predict series (when LA_METRICS_ADDR is on), and the OTLP trace exporter (when
// OTEL_EXPORTER_OTLP_ENDPOINT is set).
func (s *service) observe(ctx context.Context) error {
	if s.cfg.Observe.MetricsEnabled() {
		s.reg = newRegistry()
		s.metrics = jobs.NewMetrics(s.reg)
		s.predictMetrics = httpcompat.NewMetrics(s.reg)
	}
	if s.cfg.Observe.TracesEnabled() {
		tp, err := newTracerProvider(ctx, s.cfg.Observe, s.cfg.Runner.WorkerName)
		if err != nil {
			return err
		}
		s.traces, s.tracer = tp, tp.Tracer(jobs.TracerName)
		s.log.Info("traces exported", "endpoint", tracesURL(s.cfg.Observe.OTLPEndpoint), "service", s.cfg.Observe.ServiceName)
	}
	return nil
}

// readiness is nil while the worker can do its work: every start-up phase done, not
// stopping, and its NATS connection up (the Runners and the dead-letter watcher need it);
// otherwise it says why not. /readyz asks it.
func (s *service) readiness() error {
	if !s.ready.Load() { // also orders the reads below after the start-up's writes
		return errors.New("starting: the engine, NATS and the Runners are not all up yet")
	}
	if s.runCtx.Err() != nil {
		return errors.New("stopping")
	}
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("NATS connection is %s", strings.ToLower(st.String()))
	}
	return s.queueReadiness()
}

func (s *service) markReady(context.Context) error {
	s.ready.Store(true)
	return nil
}

func (s *service) openStorage(context.Context) error {
	if dir, ok := strings.CutPrefix(s.cfg.Runner.ResultsURL, "file://"); ok {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("results directory (LA_RESULTS_URL): %w", err)
		}
	}
	store, err := storage.Open(s.cfg.JobStorage())
	if err != nil {
		return err
	}
	s.store = store
	return nil
}

// servePredict starts the /predict server before the engines load, as the upstream server
// does: /health says "starting" until predictIsReady.
func (s *service) servePredict(context.Context) error {
	if !s.cfg.HTTP.Enabled() {
		return nil
	}
	var mounts map[string]http.Handler
	loopback := config.Loopback(s.cfg.HTTP.Addr)
	if s.cfg.Console.Served(loopback) {
		c, err := console.New(s.cfg.Console, console.Options{
			Logger: s.log.With("component", "console"), Store: s.store, OpTimeout: s.cfg.Runner.OpTimeout,
		})
		if err != nil {
			return err
		}
		s.console, mounts = c, map[string]http.Handler{console.Prefix: c.Handler()}
	} else if why := s.cfg.Console.Withheld(s.cfg.HTTP.Addr, loopback); why != "" {
		s.log.Warn("the web console is not served", "reason", why)
	}
	predict, err := httpcompat.New(s.cfg.HTTP, httpcompat.Options{
		Mounts: mounts,
		Logger: s.log.With("component", "http"),
		Chips:  s.cfg.Engine.Chips,
		Queue:  queueDescription(s.cfg),
		// What /info reports as the default; the engine applies it (Open).
		GenerationMode: s.cfg.Engine.GenerationMode,
		Ready:          s.readiness,
		Metrics:        s.predictMetrics,
		Images:         s.store, // read only when LA_HTTP_IMAGE_URLS is on
	})
	if err != nil {
		return err
	}
	s.predict = predict
	ln, err := s.predict.Listen()
	if err != nil {
		return fmt.Errorf("/predict server on LA_HTTP_ADDR=%s: %w", s.cfg.HTTP.Addr, err)
	}
	s.log.Info("/predict served", "addr", ln.Addr().String())
	s.wg.Go(func() {
		if err := s.predict.Serve(s.runCtx, ln); err != nil {
			s.log.Error("/predict server stopped", "err", err)
		}
	})
	return nil
}

func (s *service) openChips(ctx context.Context) error {
	for i := range s.cfg.Engine.Chips {
		log := s.log.With("chip", i)
		c, err := chip.Open(func() (engine.Engine, error) { return s.opts.Open(ctx, s.cfg, i, log) })
		if err != nil {
			return fmt.Errorf("open engine on chip %d: %w", i, err)
		}
		s.chips = append(s.chips, c)
		log.Info("engine ready", "info", c.Engine().Info())
	}
	return nil
}

func (s *service) serveMetrics(context.Context) error {
	if s.reg == nil {
		return nil
	}
	for i, c := range s.chips {
		registerChip(s.reg, i, c)
	}
	ms, err := listenMetrics(s.cfg.Observe.MetricsAddr, s.reg, s.readiness, bearer.New(s.cfg.HTTP.Token, httpcompat.TokenRealm))
	if err != nil {
		return err
	}
	s.wg.Go(func() { ms.serve(s.runCtx, s.log) })
	s.log.Info("metrics served", "addr", ms.Addr())
	return nil
}

func (s *service) connectQueue(ctx context.Context) error {
	var err error
	if s.nc, s.embedded, err = connectNATS(s.cfg, s.log); err != nil {
		return err
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if s.topo, err = ensureTopologyAtStart(ctx, js, s.cfg.Topology, s.cfg.NATS.Timeout, s.log); err != nil {
		return err
	}
	if s.reg != nil { // asked at each scrape, so bounded well under a scrape's timeout
		s.reg.MustRegister(jobs.NewQueueCollector(s.topo, min(s.cfg.Runner.OpTimeout, 5*time.Second)))
	}
	return nil
}

func (s *service) startRunners(context.Context) error {
	name := s.cfg.Runner.WorkerName
	if err := s.startHealer(); err != nil {
		return err
	}
	imageMemory := imagemem.NewBudget(s.cfg.Runner.DecodedBytes()) // one for all chips
	if s.reg != nil {
		s.reg.MustRegister(jobs.ImageMemoryCollectors(imageMemory)...)
	}
	for i, c := range s.chips {
		rc := s.cfg.RunnerConfig(name, i)
		rc.Logger, rc.Metrics = s.opts.Log.With("chip", i), s.metrics // the Runner adds its own "worker"
		rc.Tracer, rc.Healer = s.tracer, s.healer
		rc.ImageMemory = imageMemory
		r, err := jobs.NewRunner(s.topo, s.store, c, rc)
		if err != nil {
			return err
		}
		s.runners = append(s.runners, r)
	}
	watcher, err := jobs.NewMaxDeliveriesWatcher(s.nc, s.topo, s.store, jobs.DeadLetterConfig{
		Worker: name, DefaultOutput: s.cfg.Runner.ResultsURL, OpTimeout: s.cfg.Runner.OpTimeout,
		PollWait: s.cfg.Runner.PollWait, Logger: s.log, Metrics: s.metrics, Healer: s.healer,
	})
	if err != nil {
		return err
	}
	watchDone, err := watcher.Start(s.runCtx)
	if err != nil {
		return err
	}
	s.wg.Go(func() { <-watchDone })
	s.runErrs = make([]error, len(s.runners))
	for i, r := range s.runners {
		s.wg.Go(func() { s.runErrs[i] = r.Run(s.runCtx) })
	}
	s.log.Info("worker started", "chips", len(s.chips), "results", s.cfg.Runner.ResultsURL,
		"jobs", jobs.JobsStream+"/"+jobs.ConsumerName, "prefetch", s.cfg.RunnerPrefetch(),
		"image_memory_bytes", imageMemory.Size(),
		"storage", s.cfg.JobStorage())
	return nil
}

// startConsole starts the heartbeats every worker writes (the console of any worker lists
// them) and, when this worker serves the console, its index of the results.
func (s *service) startConsole(context.Context) error {
	maxBatch := s.cfg.Engine.MaxBatch
	beats := func() []console.Beat {
		out := make([]console.Beat, len(s.chips))
		for i, c := range s.chips {
			in := c.Engine().Info()
			out[i] = console.Beat{ID: s.cfg.Runner.WorkerName, Chip: i, Engine: in.Backend, Model: in.Model,
				MaxBatch: maxBatch, Running: c.Running(), Waiting: c.Waiting()}
		}
		return out
	}
	beatDone, err := console.Heartbeats(s.runCtx, s.topo.JS, s.cfg.Topology.Replicas, s.log, beats)
	if err != nil {
		return err
	}
	s.wg.Go(func() { <-beatDone })
	if s.console == nil {
		return nil
	}
	done, err := s.console.Start(s.runCtx, s.topo.JS, s.topo.State)
	if err != nil {
		return err
	}
	s.wg.Go(func() { <-done })
	s.log.Info("web console served", "path", console.Prefix, "actions_token", s.cfg.Console.Token != "")
	return nil
}

// predictIsReady hands chip 0 to /predict: synchronous requests share it with its Runner,
// ahead of queued jobs.
func (s *service) predictIsReady(context.Context) error {
	if s.predict == nil {
		return nil
	}
	return s.predict.SetReady(s.chips[0])
}

// queueDescription names the job queue for /info.
func queueDescription(cfg config.Worker) string {
	url := natsconn.RedactURL(cfg.NATS.URL) // /info is not authenticated
	if url == "" {
		url = "embedded nats://" + cfg.Embedded.Listen
	}
	return url + " " + jobs.JobsStream + "/" + jobs.ConsumerName
}
