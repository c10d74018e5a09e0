// Package httpcompat serves the synchronous HTTP contract of the tt-model container (the
// upstream Python server's, restated in docs/background.md, "The /predict contract"; see
// docs/http.md) from the Go worker: GET /health, GET /info, GET /v1/models and POST /predict,
// with the Python server's paths, field names, types, units, defaults and status codes, so
// the tt-model launcher, its readiness watch and ready card, the smoke test and users'
// scripts keep working unchanged. Extensions beside the contract: /livez and /readyz for
// orchestrators' probes, /openapi.json describing every route, and the /predict series
// for Prometheus (Metrics).
//
// The server reaches the model through a Device (an *chip.Chip): requests are prepared on
// their own goroutine, then wait for the chip at Interactive priority, ahead of queued jobs
// that have not started. A request whose client has gone away is dropped before the chip.
//
// Lifecycle: New, Serve (answers /health with "starting" and /predict with 503 at once),
// SetReady once the engine is loaded and warmed up, Shutdown to drain.
package httpcompat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/internal/bearer"
	"github.com/locateanything/detect/internal/imagemem"
	"github.com/locateanything/detect/internal/version"
)

// Device is the part of *chip.Chip the server uses.
type Device interface {
	// Engine gives the host-side methods: Prepare, Overlay, Info.
	Engine() engine.Engine
	// Generate waits for the device at the given priority and runs p on it.
	Generate(ctx context.Context, prio chip.Priority, p *engine.Prepared) (*engine.Prediction, error)
}

var _ Device = (*chip.Chip)(nil)

// Options are what the caller knows about this worker beyond the engine.
type Options struct {
	Logger *slog.Logger // nil: discard

	// Model and Device are what /health reports before the engine is ready (afterwards the
	// engine's Info says). Defaults: "LocateAnything-3B" and "pending".
	Model  string
	Device string

	Chips int    // chips this worker drives (/info worker.chips); 0 counts as 1
	Queue string // the job queue it consumes, e.g. "nats://nats:4222 LA_JOBS/la-workers"; "" for none

	// GenerationMode is the engine's default generation mode (LA_GENERATION_MODE, which
	// engine.Settings validates), which /info reports; "" counts as ar.
	GenerationMode engine.GenerationMode

	// Ready, when set, is asked by /readyz once the engine is ready: an error (NATS down,
	// say) makes /readyz answer 503 with it as the reason. /health does not ask it.
	Ready   func() error
	Metrics *Metrics // the /predict series; nil records nothing

	// Images fetches a request's image_url when Config.ImageURLs is on (the worker's
	// storage Router); unused otherwise.
	Images ImageSource

	// Build is the build /info's source reports; nil: this binary's (version.Get).
	Build *version.Info

	// Mounts are handlers served beside the contract's routes, by path prefix ending in
	// "/" (the web console at /console/); they answer everything below it, their own
	// 404s included, and check their own access (LA_HTTP_TOKEN does not apply). The
	// contract's paths keep their answers, 404 and 405 included.
	Mounts map[string]http.Handler
}

// Server answers the contract. Create it with New.
type Server struct {
	cfg     Config
	opts    Options
	log     *slog.Logger
	started time.Time
	source  sourceInfo
	handler http.Handler
	guard   bearer.Guard // LA_HTTP_TOKEN on /predict and /info; off when unset

	ready     atomic.Pointer[readyState] // nil while starting
	uploading atomic.Int64               // /predict requests sending their body now
	pending   atomic.Int64               // /predict requests past their body now
	memory    *imagemem.Budget           // MaxDecodedBytes, shared by the pending requests

	mu       sync.Mutex
	hs       *http.Server // set by Serve
	closed   bool         // Shutdown was called
	drained  chan struct{}
	drainErr error
}

// readyState is what SetReady hands over: the device and the engine facts read once.
type readyState struct {
	dev  Device
	info engine.Info
}

// New builds a server that is starting: it answers /health with "starting" and /predict with
// 503 until SetReady. It fails on a Config that is not Enabled or does not Validate.
func New(cfg Config, opts Options) (*Server, error) {
	if !cfg.Enabled() {
		return nil, errDisabled
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("http config: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Model == "" {
		opts.Model = "LocateAnything-3B"
	}
	if opts.Device == "" {
		opts.Device = "pending"
	}
	if opts.Chips <= 0 {
		opts.Chips = 1
	}
	if opts.GenerationMode == "" {
		opts.GenerationMode = engine.GenerationAR
	}
	if cfg.ImageURLs && opts.Images == nil {
		return nil, errors.New("httpcompat: image URLs are on (LA_HTTP_IMAGE_URLS) but no image source was given")
	}
	for prefix := range opts.Mounts {
		if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") || len(prefix) < 3 {
			return nil, fmt.Errorf("httpcompat: mount %q must be a path prefix like /console/", prefix)
		}
		if _, taken := routeMethods[strings.TrimSuffix(prefix, "/")]; taken {
			return nil, fmt.Errorf("httpcompat: mount %q would take a route of the contract", prefix)
		}
	}
	build := version.Get()
	if opts.Build != nil {
		build = *opts.Build
	}
	s := &Server{
		cfg:     cfg,
		opts:    opts,
		log:     opts.Logger,
		started: time.Now(),
		source:  sourceFrom(build),
		memory:  imagemem.NewBudget(cfg.MaxDecodedBytes),
		guard:   bearer.New(cfg.Token, TokenRealm),
		drained: make(chan struct{}),
	}
	s.handler = s.routes()
	return s, nil
}

// SetReady hands the server the device once the engine is loaded and warmed up. From then on
// /health says "ok" and /predict runs. It fails if dev is nil or the server is already ready,
// so a caller that prints the startup landmark after it prints it once.
func (s *Server) SetReady(dev Device) error {
	if dev == nil || dev.Engine() == nil {
		return errors.New("httpcompat: SetReady needs a device with an engine")
	}
	if !s.ready.CompareAndSwap(nil, &readyState{dev: dev, info: dev.Engine().Info()}) {
		return errors.New("httpcompat: SetReady called twice")
	}
	return nil
}

// Ready reports whether SetReady has been called.
func (s *Server) Ready() bool { return s.ready.Load() != nil }

// Handler is the contract's routes, for tests and for callers that run their own http.Server.
func (s *Server) Handler() http.Handler { return s.handler }

// Addr is the configured listen address (LA_HTTP_ADDR).
func (s *Server) Addr() string { return s.cfg.Addr }

// Listen opens the configured address.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("http listen on %s: %w", s.cfg.Addr, err)
	}
	return ln, nil
}

// Serve answers on ln until ctx ends or Shutdown is called, and returns only once the
// requests in flight are answered: when ctx ends it drains them for at most
// Config.ShutdownTimeout. It returns nil after a drain, the listener's error otherwise.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	case s.hs != nil:
		s.mu.Unlock()
		return errors.New("httpcompat: Serve called twice")
	}
	s.hs = hs
	s.mu.Unlock()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		select {
		case <-ctx.Done():
			drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
			defer cancel()
			if err := s.Shutdown(drainCtx); err != nil {
				s.log.Warn("http shutdown cut requests short", "err", err)
			}
		case <-stop:
		}
	})
	s.log.Info("http listening", "addr", ln.Addr().String())
	err := hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-s.drained // Shutdown returns from hs.Serve at once; wait for its drain
		err = nil
	}
	close(stop)
	wg.Wait()
	return err
}

// Shutdown stops accepting connections and waits for the requests in flight (a /predict
// waiting for or running on the chip included) until ctx ends; then it closes what is left
// and returns ctx's error. It is safe to call more than once and before Serve.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	hs, first := s.hs, !s.closed
	s.closed = true
	s.mu.Unlock()
	if !first {
		<-s.drained
		return s.drainErr
	}
	var err error
	if hs != nil {
		if err = hs.Shutdown(ctx); err != nil {
			err = fmt.Errorf("http drain: %w", err)
			hs.Close()
		}
	}
	s.drainErr = err
	close(s.drained)
	return err
}
