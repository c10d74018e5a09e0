package jobs

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// QueueCollector reports the depth of the shared job queue, asked of JetStream at each
// scrape: the jobs waiting for a worker, those handed out and not yet acknowledged, and
// the dead-letter records kept. Every worker reports the same numbers (they share the
// consumer), so dashboards take max() over workers. A scrape whose question fails (NATS
// down) leaves the gauges out and counts la_queue_stats_errors_total.
type QueueCollector struct {
	topo    *Topology
	timeout time.Duration
	errors  atomic.Uint64

	pending, ackPending, redelivered, dlq, errs *prometheus.Desc
}

// NewQueueCollector asks topo's consumer and dead-letter stream, each question bounded by
// timeout. Register it with the worker's registry.
func NewQueueCollector(topo *Topology, timeout time.Duration) *QueueCollector {
	queue := prometheus.Labels{"stream": JobsStream, "consumer": ConsumerName}
	return &QueueCollector{
		topo: topo, timeout: timeout,
		pending: prometheus.NewDesc("la_queue_pending",
			"Jobs in LA_JOBS not yet handed to any worker.", nil, queue),
		ackPending: prometheus.NewDesc("la_queue_ack_pending",
			"Jobs handed to a worker and not yet acknowledged (running, prefetched, or lost with their worker).", nil, queue),
		redelivered: prometheus.NewDesc("la_queue_redelivered",
			"Jobs handed out more than once and not yet acknowledged.", nil, queue),
		dlq: prometheus.NewDesc("la_dlq_messages",
			"Dead-letter records kept in LA_DLQ.", nil, prometheus.Labels{"stream": DLQStream}),
		errs: prometheus.NewDesc("la_queue_stats_errors_total",
			"Scrapes whose question to JetStream about the queue depth failed.", nil, nil),
	}
}

// Describe sends the series' descriptions.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ackPending, c.redelivered, c.dlq, c.errs} {
		ch <- d
	}
}

// Collect asks JetStream now and sends what it answered.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if info, err := c.topo.Consumer.Info(ctx); err != nil {
		c.errors.Add(1)
	} else {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(info.NumPending))
		ch <- prometheus.MustNewConstMetric(c.ackPending, prometheus.GaugeValue, float64(info.NumAckPending))
		ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.GaugeValue, float64(info.NumRedelivered))
	}
	if info, err := c.topo.DLQ.Info(ctx); err != nil {
		c.errors.Add(1)
	} else {
		ch <- prometheus.MustNewConstMetric(c.dlq, prometheus.GaugeValue, float64(info.State.Msgs))
	}
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(c.errors.Load()))
}
