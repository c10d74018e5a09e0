// Package config is the service's settings as one tree of structs: every variable the
// worker and submit read. A library that has settings declares them in its own config
// type (httpcompat.Config, jobs.TopologyConfig, sim.Costs, ...) with the one Validate of
// its rules; this package embeds those types in the tree beside the settings that belong
// to no single library, resolves what depends on several sections (Finish) and validates
// the whole. The programs in cmd/ fill the tree from the environment with envconfig, the
// only place it is read, and hand each library its own type.
//
// A field's `envconfig` tag is the variable's full name, `default` its default (the only
// place the default is written), `desc` its one-line meaning, and `secret:"true"` marks a
// value that is never printed.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/locateanything/detect/console"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/engine/ttnn"
	"github.com/locateanything/detect/httpcompat"
	"github.com/locateanything/detect/internal/settings"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsconn"
	"github.com/locateanything/detect/provision/extract"
	"github.com/locateanything/detect/provision/weights"
	"github.com/locateanything/detect/storage"
)

// Worker is the worker's whole configuration (docs/worker.md lists every variable). The
// sections are embedded so that envconfig reads each variable under its tag alone: a named
// struct field would make it look up SECTION_LA_NAME first.
type Worker struct {
	Engine
	Weights
	Extract
	TTNN
	Sim
	HTTP
	NATS
	Embedded
	Topology
	Runner
	Observe
	Storage
	Console

	// DataDir holds the embedded JetStream store and, by default, the results.
	DataDir string `envconfig:"LA_DATA_DIR" default:"la-data" desc:"embedded JetStream store (jetstream/) and default results (results/); one worker at a time"`
}

// Engine is the model's run-time knobs, which the engine declares and validates
// (engine.Settings), and how many chips the worker drives, one engine each.
type Engine struct {
	engine.Settings
	Chips int `envconfig:"LA_CHIPS" default:"1" desc:"chips driven by this worker, one Runner and engine each"`
}

// Validate reports every engine setting that makes no sense, each naming its variable.
func (e Engine) Validate() error {
	var v settings.Check
	v.Join(e.Settings.Validate())
	v.Positive("LA_CHIPS", int64(e.Chips))
	return v.Err()
}

// Weights says where the checkpoint comes from (provision.Choose applies the rules):
// provision/weights declares its settings, and LA_MODEL_PATH is the upstream server's
// name for LA_WEIGHTS_DIR.
type Weights struct {
	weights.Options
	ModelPath string `envconfig:"LA_MODEL_PATH" desc:"alias of LA_WEIGHTS_DIR (the upstream server's name)"`
}

// Configured reports whether a checkpoint directory was named.
func (w Weights) Configured() bool { return w.Dir != "" || w.ModelPath != "" }

// Directory is the named checkpoint directory, LA_WEIGHTS_DIR before its alias.
func (w Weights) Directory() string {
	if w.Dir != "" {
		return w.Dir
	}
	return w.ModelPath
}

// Embedded is the NATS server the worker starts when LA_NATS_URL is empty. It takes its
// authentication from the NATS section: LA_NATS_USER and LA_NATS_PASSWORD, or
// LA_NATS_TOKEN, are what producers must present (the producer role: publish jobs, read
// results and state, request cancels); LA_NATS_TLS_CERT and LA_NATS_TLS_KEY are its
// certificate, and LA_NATS_TLS_CA, when set with them, the CA its clients' certificates
// must be signed by (mutual TLS; a certificate alone is a producer). The worker connects
// in process with a login of its own; LA_NATS_OPERATOR_USER and
// LA_NATS_OPERATOR_PASSWORD are the operator's (every permission: dead-letter replay).
type Embedded struct {
	Listen           string `envconfig:"LA_NATS_LISTEN" default:"127.0.0.1:4222" desc:"the embedded NATS server's client address; off loopback only with authentication"`
	OperatorUser     string `envconfig:"LA_NATS_OPERATOR_USER" desc:"the embedded server's operator login (every permission)"`
	OperatorPassword string `envconfig:"LA_NATS_OPERATOR_PASSWORD" secret:"true" desc:"password of LA_NATS_OPERATOR_USER"`
}

// The sections the libraries declare themselves (their fields' tags name the variables,
// defaults and meanings; each has the one Validate of its rules).
type (
	// HTTP is the /predict server.
	HTTP = httpcompat.Config
	// Sim is the simulated Blackhole p150a (LA_ENGINE=sim): what each device step costs.
	Sim = sim.Costs
	// Topology is the JetStream side, applied idempotently at start-up.
	Topology = jobs.TopologyConfig
	// NATS says how to reach NATS; with LA_NATS_URL empty the worker starts the embedded
	// server (Embedded), which takes its authentication from here.
	NATS = natsconn.Config
	// Storage configures file:// and s3://.
	Storage = storage.Config
	// Console is the web console under /console/ on the /predict server.
	Console = console.Config
	// Extract is where the ttnn backend's first boot extracts the LLM to.
	Extract = extract.Options
	// TTNN is the Blackhole backend's adapter: its knobs reach it as option lines of the
	// C ABI.
	TTNN = ttnn.Config
	// Runner tunes each chip's job runner: what the worker derives a jobs.RunnerConfig
	// from (RunnerConfig).
	Runner = jobs.RunnerSettings
)

// Observe is logging, metrics and traces. No single library owns them (cmd/worker builds
// the logger, package worker, which reads this package, the metrics and the traces), so
// they are declared and validated here.
type Observe struct {
	MetricsAddr string   `envconfig:"LA_METRICS_ADDR" default:":9464" desc:"address of /metrics and the probes /livez and /readyz; off disables"`
	LogFormat   string   `envconfig:"LA_LOG_FORMAT" default:"auto" desc:"log format: text, json, or auto (text on a terminal, else json)"`
	LogLevel    LogLevel `envconfig:"LA_LOG_LEVEL" default:"info" desc:"least level logged: debug, info, warn or error"`

	// OpenTelemetry traces, OTLP over HTTP, under the standard names the OTel SDKs read;
	// off unless the endpoint is set (docs/worker.md, "Traces").
	OTLPEndpoint string `envconfig:"OTEL_EXPORTER_OTLP_ENDPOINT" desc:"OTLP/HTTP collector base URL for traces (/v1/traces is added); empty = no traces"`
	OTLPHeaders  string `envconfig:"OTEL_EXPORTER_OTLP_HEADERS" secret:"true" desc:"key1=value1,key2=value2 sent with every export (URL-encoded values)"`
	ServiceName  string `envconfig:"OTEL_SERVICE_NAME" default:"la-worker" desc:"service.name of the spans"`
}

// LogLevel is the least level logged (LA_LOG_LEVEL).
type LogLevel string

// The levels LA_LOG_LEVEL takes, as log/slog names them.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// Decode reads LA_LOG_LEVEL in any case (DEBUG, Debug): log levels are conventionally
// written both ways, and the level is not a name that case could tell apart. envconfig
// calls it.
func (l *LogLevel) Decode(v string) error {
	*l = LogLevel(strings.ToLower(v))
	return nil
}

// LogLevels lists every level, least first; Observe.Validate refuses any other.
var LogLevels = settings.Set[LogLevel]{LogDebug, LogInfo, LogWarn, LogError}

// Slog is the level as log/slog has it: LogInfo for a level outside LogLevels, which
// Validate refuses before a logger is built.
func (l LogLevel) Slog() slog.Level {
	switch l {
	case LogDebug:
		return slog.LevelDebug
	case LogWarn:
		return slog.LevelWarn
	case LogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// TracesEnabled reports whether spans are exported.
func (o Observe) TracesEnabled() bool { return o.OTLPEndpoint != "" }

// MetricsEnabled reports whether the metrics server runs.
func (o Observe) MetricsEnabled() bool {
	return o.MetricsAddr != "" && !strings.EqualFold(o.MetricsAddr, "off")
}

// OtherTools lists the variables read by the project's other tools (the launcher, the
// demo, the compose file); the worker and submit accept them in their environment.
func OtherTools() []string {
	return []string{
		"LA_WORKER_BIN", "LA_WORKER_ARGS", // launcher
		"LA_DEMO_SEED", "LA_DEMO_SCENES", "LA_DEMO_NATS_PORT", "LA_DEMO_HELDOUT", "LA_DEMO_KEEP", // make demo
		"LA_CHROMIUM", "LA_CONSOLE_SCREENSHOTS", // the console's browser test
		"LA_IMAGE", "LA_NATS_IMAGE", "LA_MINIO_IMAGE", "LA_MINIO_MC_IMAGE", "LA_HF_CACHE", // compose
	}
}

// Finish resolves what depends on other settings and validates the whole tree. It makes
// the data directory absolute and, when LA_RESULTS_URL is empty, puts the results under it.
// With no LA_FILE_ROOTS and LA_OUTPUT_ROOTS, file:// writes only below the data directory
// and reads below it and, on the single-machine default (embedded NATS on loopback), below
// the working directory: the tree `make run` and `submit DIR` are started from. workDir is
// that directory. storage never serves /etc, /proc, /sys, /dev or /run under a wider root.
func (c *Worker) Finish(workDir string) error {
	if c.DataDir == "" {
		return fmt.Errorf("LA_DATA_DIR must not be empty")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("LA_DATA_DIR %q: %w", c.DataDir, err)
	}
	c.DataDir = abs
	if err := c.finishRoots(workDir); err != nil {
		return err
	}
	return c.Validate()
}

// finishRoots fills in the file:// roots. With none configured, the worker writes only its
// results directory (LA_DATA_DIR/results by default: never the JetStream store beside it)
// and reads it and, on the single-machine default, the working directory. With roots
// configured, a default results directory is added to them, and an explicit file://
// LA_RESULTS_URL outside them is a configuration error, not a stream of failed jobs.
func (c *Worker) finishRoots(workDir string) error {
	explicit := c.Runner.ResultsURL != ""
	if !explicit {
		c.Runner.ResultsURL = "file://" + filepath.Join(c.DataDir, "results") + "/"
	}
	dir, isFile := strings.CutPrefix(c.Runner.ResultsURL, "file://")
	dir = filepath.Clean(dir)
	if len(c.Storage.FileRoots) == 0 && len(c.Storage.OutputRoots) == 0 {
		if isFile {
			c.Storage.FileRoots, c.Storage.OutputRoots = []string{dir}, []string{dir}
		}
		if c.EmbeddedLoopback() {
			if workDir == "/" {
				return fmt.Errorf("the working directory is /: set LA_FILE_ROOTS to the directories jobs may read " +
					"(the single-machine default reads below the working directory)")
			}
			c.Storage.FileRoots = append([]string{workDir}, c.Storage.FileRoots...)
		}
		return nil
	}
	if !isFile {
		return nil
	}
	writable := c.Storage.OutputRoots
	if len(writable) == 0 {
		writable = c.Storage.FileRoots
	}
	if below(dir, writable) {
		return nil
	}
	if explicit {
		return fmt.Errorf("LA_RESULTS_URL %s is outside the directories file:// may write (LA_OUTPUT_ROOTS, else LA_FILE_ROOTS: %v)",
			c.Runner.ResultsURL, writable)
	}
	for _, roots := range []*[]string{&c.Storage.FileRoots, &c.Storage.OutputRoots} {
		if len(*roots) > 0 || roots == &c.Storage.FileRoots {
			*roots = append(*roots, dir) // the default results location must stay usable
		}
	}
	return nil
}

// below reports whether dir is one of roots or inside one.
func below(dir string, roots []string) bool {
	for _, r := range roots {
		if rel, err := filepath.Rel(filepath.Clean(r), dir); err == nil && filepath.IsLocal(rel) || rel == "." {
			return true
		}
	}
	return false
}

// EmbeddedLoopback reports whether the worker runs the embedded NATS server listening on
// the loopback interface only: the single-machine default.
func (c Worker) EmbeddedLoopback() bool {
	return c.NATS.URL == "" && Loopback(c.Embedded.Listen)
}

// Loopback reports whether a host:port listen address is on the loopback interface only.
func Loopback(addr string) bool {
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

// Validate reports every setting that makes no sense, joined by "; ": each section's own
// Validate, and the rules that tie sections together.
func (c Worker) Validate() error {
	var v settings.Check
	add, join := v.Add, v.Join
	join(c.Engine.Validate())
	join(c.TTNN.Validate())
	join(c.Sim.Validate())
	join(c.HTTP.Validate())
	join(c.NATS.Validate())
	if c.NATS.URL == "" {
		c.validateEmbedded(add)
	} else if c.Embedded.OperatorUser != "" || c.Embedded.OperatorPassword != "" {
		add("LA_NATS_OPERATOR_USER and LA_NATS_OPERATOR_PASSWORD are set but LA_NATS_URL is not empty: they " +
			"define the embedded server's operator; an external server's users are its own configuration (deploy/)")
	}
	join(c.Topology.Validate())
	join(c.Runner.Validate())
	join(c.Observe.Validate())
	join(c.Storage.Validate())
	join(c.Console.Validate())
	if c.HTTP.Enabled() {
		join(c.Console.ExposureError(c.HTTP.Addr, Loopback(c.HTTP.Addr)))
	}
	errs := settings.Split(v.Err())
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// adder collects one complaint.
type adder func(format string, args ...any)

// validateEmbedded checks the embedded server's settings. Whoever can publish a job can
// make the worker read and write files (below its roots), so a server reachable from the
// network must authenticate its clients.
func (c Worker) validateEmbedded(add adder) {
	n := c.NATS
	for _, v := range [][2]string{{"LA_NATS_CREDS", n.Creds}, {"LA_NATS_NKEY_FILE", n.NKeyFile}} {
		if v[1] != "" {
			add("%s is set but LA_NATS_URL is empty: it applies to an external NATS server; the embedded "+
				"one authenticates clients by LA_NATS_USER and LA_NATS_PASSWORD, or LA_NATS_TOKEN", v[0])
		}
	}
	if n.User != "" && n.Password == "" {
		add("LA_NATS_USER is set without LA_NATS_PASSWORD: the embedded NATS server needs both")
	}
	if n.User != "" && n.Token != "" {
		add("LA_NATS_USER and LA_NATS_TOKEN are both set: the embedded NATS server authenticates by one of them")
	}
	if e := c.Embedded; (e.OperatorUser == "") != (e.OperatorPassword == "") {
		add("LA_NATS_OPERATOR_USER and LA_NATS_OPERATOR_PASSWORD must be set together")
	} else if e.OperatorUser != "" && e.OperatorUser == n.User {
		add("LA_NATS_OPERATOR_USER is LA_NATS_USER: the operator and the producers need different users")
	}
	if n.TLSCA != "" && (n.TLSCert == "" || n.TLSKey == "") {
		add("LA_NATS_TLS_CA is set for the embedded NATS server (to check client certificates) without " +
			"its own certificate: set LA_NATS_TLS_CERT and LA_NATS_TLS_KEY")
	}
	if !Loopback(c.Embedded.Listen) && !c.EmbeddedAuthenticated() {
		add("LA_NATS_LISTEN=%s is not a loopback address and the embedded NATS server would not "+
			"authenticate clients: anyone who reaches it could publish jobs that make this worker read "+
			"and write files; set LA_NATS_USER and LA_NATS_PASSWORD, or LA_NATS_TOKEN (with "+
			"LA_NATS_TLS_CERT and LA_NATS_TLS_KEY for TLS), or listen on 127.0.0.1", c.Embedded.Listen)
	}
}

// EmbeddedAuthenticated reports whether the embedded server's clients must authenticate:
// a user and password, a token, or a client certificate signed by LA_NATS_TLS_CA.
func (c Worker) EmbeddedAuthenticated() bool {
	n := c.NATS
	return (n.User != "" && n.Password != "") || n.Token != "" || (n.TLSCA != "" && n.TLSCert != "" && n.TLSKey != "")
}

// Validate reports every logging, metrics and tracing setting that makes no sense, each
// naming its variable.
func (o Observe) Validate() error {
	var v settings.Check
	add := v.Add
	v.OneOf("LA_LOG_FORMAT", o.LogFormat, "auto", "text", "json")
	if !LogLevels.Has(o.LogLevel) {
		add("LA_LOG_LEVEL is %q, want one of %s", o.LogLevel, LogLevels.List())
	}
	if o.OTLPEndpoint != "" {
		if u, err := url.Parse(o.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("OTEL_EXPORTER_OTLP_ENDPOINT is %q, want an http:// or https:// URL (OTLP over HTTP, e.g. http://otel-collector:4318)", o.OTLPEndpoint)
		}
	}
	if _, err := o.OTLPHeaderMap(); err != nil {
		add("%v", err)
	}
	return v.Err()
}

// OTLPHeaderMap parses OTEL_EXPORTER_OTLP_HEADERS, the W3C baggage-like list
// key1=value1,key2=value2 with URL-encoded values. Errors never quote a value.
func (o Observe) OTLPHeaderMap() (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(o.OTLPHeaders, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: an entry without key=value (want key1=value1,key2=value2)")
		}
		dv, err := url.QueryUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: the value of %s is not URL-encoded", k)
		}
		out[k] = dv
	}
	return out, nil
}
