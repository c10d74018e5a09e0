package jobs

import (
	"time"

	"github.com/locateanything/detect/internal/settings"
)

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
