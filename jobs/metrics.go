package jobs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/locateanything/detect/internal/decodemetrics"
)

// Outcomes counted by Metrics.Jobs.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeCanceled  = "canceled"
	OutcomeExpired   = "expired"
	OutcomeRetried   = "retried"   // transient failure, nak'd with a delay
	OutcomeRequeued  = "requeued"  // given back unfinished at shutdown
	OutcomeDuplicate = "duplicate" // already terminal, acked without running
)

// Metrics are the Prometheus series of the job path. A nil *Metrics records nothing.
type Metrics struct {
	Jobs         *prometheus.CounterVec   // la_jobs_total{outcome}
	Stage        *prometheus.HistogramVec // la_job_stage_seconds{stage}
	Held         prometheus.Gauge         // la_jobs_held
	Running      prometheus.Gauge         // la_jobs_running (on or queued for the device)
	Retries      prometheus.Counter       // la_job_retries_total
	DeadLettered prometheus.Counter       // la_jobs_dead_lettered_total

	// TopologyRecreated counts the streams, consumers and bucket this worker found gone
	// and recreated (Healer).
	TopologyRecreated *prometheus.CounterVec // la_topology_recreated_total{object}

	// DecodeSteps and TokensPerStep describe each answered job's decode, by generation
	// mode: how many device steps it took after the prefill, and how many tokens each
	// step committed on average (about 1 for ar; up to 6 for hybrid, a box per step).
	DecodeSteps   *prometheus.HistogramVec // la_job_decode_steps{generation_mode}
	TokensPerStep *prometheus.HistogramVec // la_job_tokens_per_step{generation_mode}
	decode        decodemetrics.Series     // the two above
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "la_jobs_total", Help: "Jobs handled, by outcome.",
		}, []string{"outcome"}),
		Stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "la_job_stage_seconds",
			Help:    "Wall time of each job stage (queue_wait, fetch, preprocess, vision, prefill, decode, upload, total).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14), // 1 ms .. ~150 s
		}, []string{"stage"}),
		Held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "la_jobs_held", Help: "Job messages held by this worker (prefetched or running).",
		}),
		Running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "la_jobs_running", Help: "Jobs on a chip or waiting for one.",
		}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "la_job_retries_total", Help: "Transient failures given back with a delay.",
		}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "la_jobs_dead_lettered_total", Help: "Records written to LA_DLQ.",
		}),
	}
	m.TopologyRecreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "la_topology_recreated_total", Help: "JetStream streams, consumers and buckets found gone and recreated, by name.",
	}, []string{"object"})
	reg.MustRegister(m.TopologyRecreated)
	decode := decodemetrics.New("la_job", "answered job")
	m.decode = decode
	m.DecodeSteps, m.TokensPerStep = decode.Steps, decode.PerStep
	reg.MustRegister(m.Jobs, m.Stage, m.Held, m.Running, m.Retries, m.DeadLettered)
	reg.MustRegister(decode.Collectors()...)
	return m
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.Jobs.WithLabelValues(o).Inc()
		if o == OutcomeRetried {
			m.Retries.Inc()
		}
	}
}

func (m *Metrics) deadLettered() {
	if m != nil {
		m.DeadLettered.Inc()
	}
}

func (m *Metrics) held(delta float64) {
	if m != nil {
		m.Held.Add(delta)
	}
}

func (m *Metrics) running(delta float64) {
	if m != nil {
		m.Running.Add(delta)
	}
}

// decoded records an answered job's decode steps and tokens per step.
func (m *Metrics) decoded(a Answer) {
	if m != nil {
		m.decode.Observe(a.GenerationMode, a.DecodeSteps, a.NumGeneratedTokens)
	}
}

func (m *Metrics) stages(t JobTiming) {
	if m == nil {
		return
	}
	for stage, ms := range map[string]float64{
		"queue_wait": t.QueueWait, "fetch": t.Fetch, "preprocess": t.Preprocess,
		"vision": t.Vision, "prefill": t.Prefill, "decode": t.Decode,
		"upload": t.Upload, "total": t.Total,
	} {
		if ms > 0 {
			m.Stage.WithLabelValues(stage).Observe(ms / 1000)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
