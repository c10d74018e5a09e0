// Package decodemetrics holds the two Prometheus series that say how answers were
// decoded: device steps after the prefill, and generated tokens per such step, by
// generation mode. The job path (la_job_*) and /predict (la_predict_*) each register a
// pair, so that both kinds of answer are counted with one definition.
package decodemetrics

import (
	"cmp"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/locateanything/detect/engine"
)

// Series are one pair: <prefix>_decode_steps and <prefix>_tokens_per_step, both with the
// label generation_mode.
type Series struct {
	Steps   *prometheus.HistogramVec
	PerStep *prometheus.HistogramVec
}

// New makes the pair named after prefix ("la_job"); what names one observation in the
// help text ("answered job"). Every generation mode's series exist from the start, at
// zero.
func New(prefix, what string) Series {
	s := Series{
		Steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "_decode_steps",
			Help:    fmt.Sprintf("Device steps after the prefill of each %s, by generation mode (ar, hybrid).", what),
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024, the largest budget
		}, []string{"generation_mode"}),
		PerStep: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "_tokens_per_step",
			Help:    fmt.Sprintf("Generated tokens per device step after the prefill of each %s, by generation mode.", what),
			Buckets: []float64{1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6},
		}, []string{"generation_mode"}),
	}
	for _, mode := range engine.GenerationModes {
		s.Steps.WithLabelValues(string(mode))
		s.PerStep.WithLabelValues(string(mode))
	}
	return s
}

// Collectors are the pair, for registering.
func (s Series) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.Steps, s.PerStep}
}

// Observe records one answer of tokens generated tokens in steps steps after the
// prefill. An answer of one token took no step and has no rate. A prediction that names
// no mode was decoded one token at a time (ar), as results say too.
func (s Series) Observe(mode engine.GenerationMode, steps, tokens int) {
	mode = cmp.Or(mode, engine.GenerationAR)
	s.Steps.WithLabelValues(string(mode)).Observe(float64(steps))
	if steps > 0 {
		s.PerStep.WithLabelValues(string(mode)).Observe(float64(tokens) / float64(steps))
	}
}
