package jobs

import (
	"time"

	"github.com/locateanything/detect/internal/imagemem"
	"github.com/locateanything/detect/internal/settings"
)

// RunnerSettings tune the runners of a worker, declared here (the tags: variable, default,
// meaning; package config reads them from the environment): the timing, and what the
// worker derives the rest of each chip's RunnerConfig from (config.Worker.RunnerConfig:
// the name of each chip's Runner and the prefetch depend on other sections).
type RunnerSettings struct {
	WorkerName string `envconfig:"LA_WORKER_NAME" desc:"name in results, state and logs; empty = host-pid (-chipN added per chip)"`
	ResultsURL string `envconfig:"LA_RESULTS_URL" desc:"output prefix of jobs that name none; empty = file://LA_DATA_DIR/results/"`
	Prefetch   int    `envconfig:"LA_PREFETCH" default:"0" desc:"job messages held per chip, running or being prepared; 0 = LA_MAX_BATCH + 2"`
	RunnerTiming
	// MaxDecodedBytes is the image memory all jobs of the worker (every chip's Runner)
	// share, as estimated from each image's header before it is decoded; 0 = a quarter of
	// the memory the worker may use (imagemem.DefaultSize).
	MaxDecodedBytes int64 `envconfig:"LA_MAX_DECODED_BYTES" default:"0" desc:"image memory all jobs share, estimated from each image's header; 0 = a quarter of the worker's memory"`
}

// Validate reports every runner setting that makes no sense, the timing's included, each
// naming its variable.
func (r RunnerSettings) Validate() error {
	var v settings.Check
	if r.WorkerName != "" && !ValidToken(r.WorkerName) {
		v.Add("LA_WORKER_NAME %q: want 1-128 characters of [A-Za-z0-9_-]", r.WorkerName)
	}
	v.NotNegative("LA_PREFETCH", int64(r.Prefetch), "LA_MAX_BATCH + 2")
	v.NotNegative("LA_MAX_DECODED_BYTES", r.MaxDecodedBytes, "derived from the memory")
	v.Join(r.RunnerTiming.Validate())
	return v.Err()
}

// DecodedBytes is the size of the decoded-image budget the Runners share:
// LA_MAX_DECODED_BYTES, or one derived from the machine when it is 0.
func (r RunnerSettings) DecodedBytes() int64 {
	if r.MaxDecodedBytes > 0 {
		return r.MaxDecodedBytes
	}
	return imagemem.DefaultSize()
}

// RunnerTiming is the timing of every Runner, declared here (the tags: variable, default,
// meaning; package config reads them from the environment). RunnerConfig embeds it.
type RunnerTiming struct {
	Grace         time.Duration `envconfig:"LA_GRACE" default:"30s" desc:"after SIGTERM, time the jobs in flight get to finish before they are given back"`
	PollWait      time.Duration `envconfig:"LA_POLL_WAIT" default:"2s" desc:"how long one pull waits for a job (also the stop latency)"`
	RetryDelay    time.Duration `envconfig:"LA_RETRY_DELAY" default:"5s" desc:"redelivery delay after the first transient failure of a job, doubling"`
	RetryDelayMax time.Duration `envconfig:"LA_RETRY_DELAY_MAX" default:"5m" desc:"cap of the growing redelivery delay"`
	OpTimeout     time.Duration `envconfig:"LA_OP_TIMEOUT" default:"30s" desc:"limit of one storage or NATS call"`
}

// Validate reports every timing that makes no sense, each naming its variable.
func (t RunnerTiming) Validate() error {
	var v settings.Check
	v.PositiveDuration("LA_GRACE", t.Grace)
	v.PositiveDuration("LA_POLL_WAIT", t.PollWait)
	v.PositiveDuration("LA_RETRY_DELAY", t.RetryDelay)
	v.PositiveDuration("LA_OP_TIMEOUT", t.OpTimeout)
	if t.RetryDelayMax < t.RetryDelay {
		v.Add("LA_RETRY_DELAY_MAX %s is shorter than LA_RETRY_DELAY %s", t.RetryDelayMax, t.RetryDelay)
	}
	return v.Err()
}
