package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/httpcompat"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsconn"
	"github.com/locateanything/detect/storage"
)

// Config is the worker's whole configuration, read from LA_* environment variables
// (docs/worker.md lists every one with its default).
type Config struct {
	// Engine: the seed server's knobs keep their names and meaning.
	WeightsDir      string `envconfig:"LA_WEIGHTS_DIR"` // checkpoint directory
	ModelPath       string `envconfig:"LA_MODEL_PATH"`  // alias of LA_WEIGHTS_DIR
	Engine          string `envconfig:"LA_ENGINE" default:"cpu"`
	Threads         int    `envconfig:"LA_THREADS"`        // 0 = one per core
	InTokenLimit    int    `envconfig:"LA_IN_TOKEN_LIMIT"` // 0 = min(1024, the checkpoint's)
	CanonGrid       string `envconfig:"LA_CANON_GRID"`     // HxW in patches; empty = derived
	CanonAspect     string `envconfig:"LA_CANON_ASPECT" default:"1920x1080"`
	MaxSeqLen       int    `envconfig:"LA_MAX_SEQ_LEN" default:"4096"`
	MaxNewTokens    int    `envconfig:"LA_MAX_NEW_TOKENS" default:"128"`
	MaxNewTokensCap int    `envconfig:"LA_MAX_NEW_TOKENS_CAP" default:"1024"`
	Chips           int    `envconfig:"LA_CHIPS" default:"1"` // one Runner (and engine) per chip
	ChipIndex       int    `ignored:"true"`                   // which chip openEngine opens (0..Chips-1)

	// HTTP /predict (the httpcompat server). "off" disables it.
	HTTPAddr string            `envconfig:"LA_HTTP_ADDR" default:":20000"`
	HTTP     httpcompat.Config `ignored:"true"` // LA_HTTP_*, read by httpcompat.ConfigFromEnv

	// Landmarks receives the startup lines the tt-model launcher watches (stdout in main;
	// nil discards them).
	Landmarks io.Writer `ignored:"true"`

	// Log is the chip's logger, set by runWorker for openEngine (the first-boot LLM
	// extraction reports through it); nil discards.
	Log *slog.Logger `ignored:"true"`

	// Local state: the embedded JetStream store and, by default, the results.
	DataDir string `envconfig:"LA_DATA_DIR" default:"la-data"`

	// NATS: LA_NATS_URL (empty starts the embedded server on NATSListen), credentials, TLS.
	NATS       natsconn.Config
	NATSListen string `envconfig:"LA_NATS_LISTEN" default:"127.0.0.1:4222"`

	// Topology, applied idempotently at start-up.
	Replicas        int             `envconfig:"LA_REPLICAS" default:"1"`
	DuplicateWindow time.Duration   `envconfig:"LA_DUPLICATE_WINDOW" default:"2m"`
	JobsMaxAge      time.Duration   `envconfig:"LA_JOBS_MAX_AGE" default:"0s"`
	ResultsMaxAge   time.Duration   `envconfig:"LA_RESULTS_MAX_AGE" default:"168h"`
	DLQMaxAge       time.Duration   `envconfig:"LA_DLQ_MAX_AGE" default:"720h"`
	StateMaxAge     time.Duration   `envconfig:"LA_STATE_MAX_AGE" default:"168h"`
	AckWait         time.Duration   `envconfig:"LA_ACK_WAIT" default:"60s"`
	MaxDeliver      int             `envconfig:"LA_MAX_DELIVER" default:"10"`
	BackOff         []time.Duration `envconfig:"LA_BACKOFF" default:"60s,2m,5m"`
	MaxAckPending   int             `envconfig:"LA_MAX_ACK_PENDING" default:"1024"`

	// Runner.
	WorkerName    string        `envconfig:"LA_WORKER_NAME"` // default host-pid
	ResultsURL    string        `envconfig:"LA_RESULTS_URL"` // default output prefix; default file://<LA_DATA_DIR>/results/
	Prefetch      int           `envconfig:"LA_PREFETCH" default:"2"`
	Grace         time.Duration `envconfig:"LA_GRACE" default:"30s"`
	PollWait      time.Duration `envconfig:"LA_POLL_WAIT" default:"2s"`
	RetryDelay    time.Duration `envconfig:"LA_RETRY_DELAY" default:"5s"`
	RetryDelayMax time.Duration `envconfig:"LA_RETRY_DELAY_MAX" default:"5m"`
	OpTimeout     time.Duration `envconfig:"LA_OP_TIMEOUT" default:"30s"`

	// Observability.
	MetricsAddr string `envconfig:"LA_METRICS_ADDR" default:":9464"` // "" or "off" disables
	LogFormat   string `envconfig:"LA_LOG_FORMAT" default:"auto"`    // auto, text, json
	LogLevel    string `envconfig:"LA_LOG_LEVEL" default:"info"`     // debug, info, warn, error

	// Storage: LA_S3_* and LA_FILE_ROOTS (storage.Config carries the full names).
	storage.Config
}

// loadConfig reads the environment and checks the result.
func loadConfig() (Config, error) {
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	if err := c.finish(); err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	http, err := httpcompat.ConfigFromEnv()
	if err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	c.HTTP = http
	c.HTTP.Addr = c.HTTPAddr
	if strings.EqualFold(c.HTTPAddr, "off") {
		c.HTTP.Addr = ""
	}
	return c, nil
}

// finish resolves aliases and derived defaults, then validates.
func (c *Config) finish() error {
	if c.WeightsDir == "" {
		c.WeightsDir = c.ModelPath
	}
	if c.DataDir == "" {
		return errors.New("LA_DATA_DIR must not be empty")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("LA_DATA_DIR %q: %w", c.DataDir, err)
	}
	c.DataDir = abs
	if c.ResultsURL == "" {
		// The single-machine default: results beside the embedded store, readable by file://.
		c.ResultsURL = "file://" + filepath.Join(c.DataDir, "results") + "/"
		switch {
		case len(c.FileRoots) == 0 && c.NATS.URL == "" && loopback(c.NATSListen):
			// Embedded NATS reachable from this machine only: jobs may name any local
			// file (what `submit DIR` sends against the embedded default).
			c.FileRoots = []string{"/"}
		default:
			c.FileRoots = append(c.FileRoots, c.DataDir)
		}
	}
	switch {
	case c.Chips < 1:
		return fmt.Errorf("LA_CHIPS is %d, want at least 1", c.Chips)
	case c.Prefetch < 1:
		return fmt.Errorf("LA_PREFETCH is %d, want at least 1", c.Prefetch)
	case c.Grace < 0:
		return fmt.Errorf("LA_GRACE is %s, want a positive duration", c.Grace)
	case c.LogFormat != "auto" && c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("LA_LOG_FORMAT is %q, want auto, text or json", c.LogFormat)
	case c.MaxNewTokens < 1 || c.MaxNewTokens > c.MaxNewTokensCap:
		return fmt.Errorf("LA_MAX_NEW_TOKENS is %d, want 1..LA_MAX_NEW_TOKENS_CAP (%d)", c.MaxNewTokens, c.MaxNewTokensCap)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.WorkerName != "" && !jobs.ValidToken(c.WorkerName) {
		return fmt.Errorf("LA_WORKER_NAME %q: want 1-128 characters of [A-Za-z0-9_-]", c.WorkerName)
	}
	if err := c.topology().Validate(); err != nil {
		return fmt.Errorf("topology (LA_REPLICAS, LA_ACK_WAIT, LA_MAX_DELIVER, LA_BACKOFF, ...): %w", err)
	}
	if strings.EqualFold(c.MetricsAddr, "off") {
		c.MetricsAddr = ""
	}
	return nil
}

// topology is the JetStream part of the configuration.
func (c Config) topology() jobs.TopologyConfig {
	return jobs.TopologyConfig{
		Replicas:        c.Replicas,
		DuplicateWindow: c.DuplicateWindow,
		JobsMaxAge:      c.JobsMaxAge,
		ResultsMaxAge:   c.ResultsMaxAge,
		DLQMaxAge:       c.DLQMaxAge,
		StateMaxAge:     c.StateMaxAge,
		AckWait:         c.AckWait,
		MaxDeliver:      c.MaxDeliver,
		BackOff:         c.BackOff,
		MaxAckPending:   c.MaxAckPending,
	}
}

// runnerConfig is the configuration of one chip's Runner.
func (c Config) runnerConfig(worker string) jobs.RunnerConfig {
	return jobs.RunnerConfig{
		Worker:        worker,
		Prefetch:      c.Prefetch,
		DefaultOutput: c.ResultsURL,
		MaxImageBytes: c.MaxImageBytes,
		Grace:         c.Grace,
		PollWait:      c.PollWait,
		RetryDelay:    c.RetryDelay,
		RetryDelayMax: c.RetryDelayMax,
		OpTimeout:     c.OpTimeout,
	}
}

// landmarks is where the launcher's startup lines go.
func (c Config) landmarks() io.Writer {
	if c.Landmarks == nil {
		return io.Discard
	}
	return c.Landmarks
}

// loopback reports whether a host:port listen address is on the loopback interface only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
