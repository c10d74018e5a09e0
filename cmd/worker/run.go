package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/httpcompat"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// engineOpener opens the engine of chip cfg.ChipIndex; openEngine in production, a test
// double in tests.
type engineOpener func(ctx context.Context, cfg Config) (engine.Engine, error)

// runWorker runs the worker until ctx ends (SIGTERM or SIGINT in main), then drains: the
// Runners stop pulling, finish what they hold within LA_GRACE and give back the rest;
// every goroutine started here has stopped when it returns. It returns nil after a clean
// drain and an error when the worker cannot start.
func runWorker(ctx context.Context, cfg Config, log *slog.Logger, open engineOpener) (err error) {
	// The tt-model launcher watches for uvicorn's landmark lines: exactly one of "startup
	// complete" or "startup failed".
	started := false
	defer func() {
		if err != nil && !started {
			_ = httpcompat.StartupFailed(cfg.landmarks(), err)
		}
	}()
	if cfg.WorkerName == "" {
		host, _ := os.Hostname()
		cfg.WorkerName = fmt.Sprintf("%s-%d", strings.ReplaceAll(host, ".", "-"), os.Getpid())
	}
	log = log.With("worker", cfg.WorkerName)

	if strings.HasPrefix(cfg.ResultsURL, "file://") {
		if err := os.MkdirAll(strings.TrimPrefix(cfg.ResultsURL, "file://"), 0o755); err != nil {
			return fmt.Errorf("results directory (LA_RESULTS_URL): %w", err)
		}
	}
	store, err := storage.Open(cfg.Config)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()

	// The chips are closed last, after everything that uses them has stopped.
	chips := make([]*chip.Chip, 0, cfg.Chips)
	defer func() {
		for i, c := range chips {
			if err := c.Close(); err != nil {
				log.Error("closing chip", "chip", i, "err", err)
			}
		}
	}()

	// Everything started below runs until runCtx ends and is waited for before return,
	// on the error paths too.
	var wg sync.WaitGroup
	runCtx, stopAll := context.WithCancel(ctx)
	defer func() { stopAll(); wg.Wait() }()

	// The /predict server answers from the start, as the seed's server does: /health says
	// "starting" while the engines load and "ok" once the worker is up.
	var predict *httpcompat.Server
	if cfg.HTTP.Addr != "" {
		predict = httpcompat.New(cfg.HTTP, httpcompat.Options{
			Logger: log.With("component", "http"),
			Chips:  cfg.Chips,
			Queue:  queueDescription(cfg),
		})
		ln, err := predict.Listen()
		if err != nil {
			return fmt.Errorf("/predict server on LA_HTTP_ADDR=%s: %w", cfg.HTTP.Addr, err)
		}
		log.Info("/predict served", "addr", ln.Addr().String())
		wg.Go(func() {
			if err := predict.Serve(runCtx, ln); err != nil {
				log.Error("/predict server stopped", "err", err)
			}
		})
	}

	for i := range cfg.Chips {
		chipCfg := cfg
		chipCfg.ChipIndex = i
		chipCfg.Log = log.With("chip", i)
		c, err := chip.Open(func() (engine.Engine, error) { return open(ctx, chipCfg) })
		if err != nil {
			return fmt.Errorf("open engine on chip %d: %w", i, err)
		}
		chips = append(chips, c)
		log.Info("engine ready", "chip", i, "info", c.Engine().Info())
	}

	reg := newRegistry()
	metrics := jobs.NewMetrics(reg)
	for i, c := range chips {
		registerChip(reg, i, c)
	}

	if cfg.MetricsAddr != "" {
		ms, err := listenMetrics(cfg.MetricsAddr, reg)
		if err != nil {
			return err
		}
		wg.Go(func() { ms.serve(runCtx, log) })
		log.Info("metrics served", "addr", ms.Addr())
	}

	nc, embedded, err := connectNATS(cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		nc.Close()
		if embedded != nil {
			embedded.Shutdown()
		}
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	topo, err := jobs.EnsureTopology(ctx, js, cfg.topology())
	if err != nil {
		return err
	}

	runners := make([]*jobs.Runner, len(chips))
	for i, c := range chips {
		name := cfg.WorkerName
		if len(chips) > 1 {
			name = fmt.Sprintf("%s-chip%d", cfg.WorkerName, i)
		}
		rc := cfg.runnerConfig(name)
		rc.Logger, rc.Metrics = log.With("chip", i), metrics
		if runners[i], err = jobs.NewRunner(topo, store, c, rc); err != nil {
			return err
		}
	}
	watcher, err := jobs.NewMaxDeliveriesWatcher(nc, topo, store, jobs.DeadLetterConfig{
		Worker: cfg.WorkerName, DefaultOutput: cfg.ResultsURL, OpTimeout: cfg.OpTimeout, Logger: log, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	watchDone, err := watcher.Start(runCtx)
	if err != nil {
		return err
	}
	wg.Go(func() { <-watchDone })

	runErrs := make([]error, len(runners))
	for i, r := range runners {
		wg.Go(func() { runErrs[i] = r.Run(runCtx) })
	}
	log.Info("worker started", "chips", len(chips), "results", cfg.ResultsURL,
		"jobs", jobs.JobsStream+"/"+jobs.ConsumerName, "prefetch", cfg.Prefetch, "storage", cfg.Config)
	if predict != nil {
		// Synchronous requests share chip 0 with its Runner, ahead of queued jobs.
		if err := predict.SetReady(chips[0]); err != nil {
			return err
		}
	}
	if err := httpcompat.StartupComplete(cfg.landmarks()); err != nil {
		return err
	}
	started = true

	<-ctx.Done()
	log.Info("stopping: finishing held jobs", "grace", cfg.Grace)
	stopAll()
	wg.Wait()
	if err := errors.Join(runErrs...); err != nil {
		return err
	}
	log.Info("worker stopped")
	return nil
}

// queueDescription names the job queue for /info.
func queueDescription(cfg Config) string {
	url := cfg.NATS.URL
	if url == "" {
		url = "embedded nats://" + cfg.NATSListen
	}
	return url + " " + jobs.JobsStream + "/" + jobs.ConsumerName
}
