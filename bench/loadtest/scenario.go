package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/httpcompat"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/worker"
)

// scenario is one worker configuration the load test runs the whole job set through.
type scenario struct {
	name     string // "serial", "batch1", "batch8", ...
	chips    int    // LA_CHIPS
	batch    int    // LA_MAX_BATCH
	prefetch int    // LA_PREFETCH; 0 = the worker's default, LA_MAX_BATCH + 2
}

// heldPerChip is the number of jobs each chip's Runner holds at once.
func (s scenario) heldPerChip() int {
	if s.prefetch > 0 {
		return s.prefetch
	}
	return s.batch + 2
}

// Outcome is what one scenario measured. The JSON names are the report's.
type Outcome struct {
	Scenario string `json:"scenario"`
	Chips    int    `json:"chips"`
	Batch    int    `json:"batch"`
	Prefetch int    `json:"prefetch"`
	Jobs     int    `json:"jobs"`
	Failed   int    `json:"failed"`

	WallS float64 `json:"wall_s"`
	// JobsPerS, DeviceBusy and SimWakeLate are measured under backlog, the state of a
	// loaded service: from the first publish until the queue runs dry (every job left is
	// held by a Runner), BacklogS seconds. JobsPerS is the chips' answer rate in that
	// time: the tokens they generated over the run's mean tokens per job. (Results come in
	// bursts, a batch whose sequences started together finishing together, so counting
	// results in a window would be off by up to a batch at each end.) The *Overall figures
	// cover the whole run, to the last result: the final drain included, when the last
	// sequences of a batch finish with nothing to replace them.
	JobsPerS          float64 `json:"jobs_per_s"`
	JobsPerSPerChip   float64 `json:"jobs_per_s_per_chip"`
	JobsPerSOverall   float64 `json:"jobs_per_s_overall"`
	BacklogS          float64 `json:"backlog_s"`
	DeviceBusy        float64 `json:"device_busy"` // modelled device time / (chips x time)
	DeviceBusyOverall float64 `json:"device_busy_overall"`
	// SimWakeLate is the wake-up lateness the simulated chips forgave their sleeping
	// threads (docs/sim.md), as a share of chips x time: how oversubscribed the machine
	// running the test was. It is neither device time nor idle time.
	SimWakeLate     float64 `json:"sim_wake_late"`
	MeanBatch       float64 `json:"mean_batch"` // sequences per decode step
	P50MS           float64 `json:"p50_ms"`     // submit to result
	P95MS           float64 `json:"p95_ms"`
	HostCPUMSPerJob float64 `json:"host_cpu_ms_per_job"`
	TokensPerJob    float64 `json:"tokens_per_job"`
	// DeviceBoundJobsPerS is what the chips would do if the host were free: the cost model
	// at the answers' mean length, with every decode step full (batch B).
	DeviceBoundJobsPerS float64 `json:"device_bound_jobs_per_s"`

	// With --console: the requests a browser open on the console made during the run
	// (overview, batches, the gallery's first page every second; each thumbnail once),
	// those that failed, and their mean time.
	ConsoleRequests int     `json:"console_requests,omitempty"`
	ConsoleFailed   int     `json:"console_failed,omitempty"`
	ConsoleMeanMS   float64 `json:"console_mean_ms,omitempty"`
}

// arrival is one result message and when it came.
type arrival struct {
	at   time.Time
	data []byte
}

// runScenario starts a worker configured for s on its own embedded NATS server and data
// directory under tmp, submits the job set, collects every result and stops the worker.
func (r *run) runScenario(ctx context.Context, s scenario) (Outcome, error) {
	dir, err := os.MkdirTemp(r.tmp, s.name+"-")
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(dir) // the JetStream store and the results of this scenario
	cfg, err := r.workerConfig(s, dir)
	if err != nil {
		return Outcome{}, err
	}

	meters := make([]*sim.Meter, s.chips)
	for i := range meters {
		meters[i] = &sim.Meter{}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := newLandmarkWatch()
	stopped := make(chan error, 1)
	go func() {
		stopped <- worker.Run(wctx, cfg, worker.Options{Log: r.log, Landmarks: ready, Open: worker.MeteredOpener(meters)})
	}()
	defer func() { stop(); <-stopped }()
	select {
	case <-ready.done:
	case err := <-stopped:
		stopped <- err // for the deferred wait
		return Outcome{}, fmt.Errorf("%s: the worker did not start: %v", s.name, err)
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}

	nc, err := cfg.NATS.Connect("nats://"+cfg.Embedded.Listen, "la-loadtest", r.log)
	if err != nil {
		return Outcome{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Outcome{}, err
	}
	batch := "loadtest-" + s.name
	arrivals := make(chan arrival, r.o.jobs)
	cons, err := js.OrderedConsumer(ctx, jobs.ResultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{jobs.ResultSubjectPrefix + batch + ".>"},
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("results consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case arrivals <- arrival{at: time.Now(), data: m.Data()}:
		default: // a duplicate beyond the job count; the count is already complete
		}
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("results consumer: %w", err)
	}
	defer cc.Stop()

	if !r.o.console {
		return r.measure(ctx, s, js, batch, meters, arrivals)
	}
	page := &browser{base: "http://" + cfg.HTTP.Addr, batch: batch, every: r.o.consoleEvery}
	pctx, stopPage := context.WithCancel(ctx)
	pageDone := make(chan struct{})
	go func() { defer close(pageDone); page.run(pctx) }()
	o, err := r.measure(ctx, s, js, batch, meters, arrivals)
	stopPage()
	<-pageDone
	o.ConsoleRequests, o.ConsoleFailed, o.ConsoleMeanMS = page.summary()
	o.ConsoleMeanMS = round(o.ConsoleMeanMS, 1)
	return o, err
}

// workerConfig is the loaded configuration with the scenario's settings and a private,
// single-machine setup: the simulated chip, an embedded NATS server on a free loopback
// port, results under dir, the frames readable, no /predict and no metrics server. The
// rest (LA_SIM_*, LA_MAX_NEW_TOKENS, LA_ACK_WAIT, ...) is as loaded.
func (r *run) workerConfig(s scenario, dir string) (config.Worker, error) {
	cfg := r.base
	addr, err := freeport.Addr()
	if err != nil {
		return cfg, err
	}
	cfg.Engine.Backend, cfg.Engine.Chips, cfg.Engine.MaxBatch = sim.Name, s.chips, s.batch
	cfg.Runner.Prefetch, cfg.Runner.WorkerName = s.prefetch, "loadtest"
	cfg.Runner.PollWait = min(cfg.Runner.PollWait, 250*time.Millisecond) // stops sooner after the last job; no effect under load
	cfg.DataDir, cfg.Runner.ResultsURL = filepath.Join(dir, "data"), ""
	cfg.NATS = config.NATS{Timeout: cfg.NATS.Timeout} // its own server: no credentials, no TLS
	cfg.Embedded.Listen = addr
	cfg.HTTP.Addr, cfg.Observe.MetricsAddr = "off", "off"
	cfg.Console.Mode = "off"
	if r.o.console { // /predict on loopback, to serve the console the browser polls
		if cfg.HTTP.Addr, err = freeport.Addr(); err != nil {
			return cfg, err
		}
		cfg.Console.Mode = "on"
	}
	cfg.Storage.FileRoots, cfg.Storage.OutputRoots = []string{r.frames.dir}, nil
	if err := cfg.Finish(dir); err != nil {
		return cfg, fmt.Errorf("%s: worker configuration: %w", s.name, err)
	}
	return cfg, nil
}

// measure publishes the job set and collects the results, reading the clock, the process
// CPU time and the device meters at the start, when the queue runs dry (every job left is
// held by a Runner: the end of the backlog) and at the last result.
func (r *run) measure(ctx context.Context, s scenario, js jetstream.JetStream, batch string, meters []*sim.Meter,
	arrivals <-chan arrival) (Outcome, error) {
	n := r.o.jobs
	backlogEnd := n - s.chips*s.heldPerChip() // results after which the queue may be empty
	type mark struct {
		at    time.Time
		cpu   time.Duration
		meter sim.MeterReading
	}
	read := func() mark {
		m := mark{at: time.Now(), cpu: cpuTime()}
		for _, mt := range meters {
			m.meter = m.meter.Add(mt.Read())
		}
		return m
	}

	start := read()
	submitted := make(map[string]time.Time, n)
	for i := range n {
		id := fmt.Sprintf("%s-%06d", batch, i)
		job := jobs.Job{
			ID: id, Image: "file://" + r.frames.paths[i%len(r.frames.paths)], Query: r.o.query,
			Overlay: r.o.overlay, Batch: batch,
		}
		if r.o.overlay && r.o.format != overlay.PNG {
			job.OverlayFormat = r.o.format // empty means PNG, the default
		}
		data, err := json.Marshal(job)
		if err != nil {
			return Outcome{}, err
		}
		submitted[id] = time.Now()
		if _, err := js.Publish(ctx, jobs.JobSubject(jobs.DefaultClass), data, jetstream.WithMsgID(id)); err != nil {
			return Outcome{}, fmt.Errorf("publishing job %s: %w", id, err)
		}
	}

	var latencies []time.Duration
	var tokens, failed int
	var backlog mark
	seen := map[string]bool{}
	stall := time.NewTimer(r.o.stall)
	defer stall.Stop()
	for len(seen) < n {
		select {
		case a := <-arrivals:
			var res jobs.Result
			if err := json.Unmarshal(a.data, &res); err != nil {
				return Outcome{}, fmt.Errorf("a result that is not JSON: %w", err)
			}
			sent, ok := submitted[res.ID]
			if !ok || seen[res.ID] {
				continue
			}
			seen[res.ID] = true
			latencies = append(latencies, a.at.Sub(sent))
			tokens += res.NumGeneratedTokens
			if res.Status != jobs.StatusSucceeded {
				failed++
				if failed == 1 {
					r.log.Warn("a job failed", "id", res.ID, "status", res.Status, "error", res.Error)
				}
			}
			if len(seen) == backlogEnd {
				backlog = read()
			}
			stall.Reset(r.o.stall)
		case <-stall.C:
			return Outcome{}, fmt.Errorf("%s: no result for %s after %d of %d", s.name, r.o.stall, len(seen), n)
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		}
	}
	end := read()

	wall := end.at.Sub(start.at)
	o := Outcome{
		Scenario: s.name, Chips: s.chips, Batch: s.batch, Prefetch: s.heldPerChip(), Jobs: n, Failed: failed,
		WallS:           round(wall.Seconds(), 2),
		JobsPerSOverall: round(float64(n)/wall.Seconds(), 2),
		MeanBatch:       round(end.meter.Sub(start.meter).MeanBatch(), 2),
		P50MS:           round(ms(percentile(latencies, 50)), 0),
		P95MS:           round(ms(percentile(latencies, 95)), 0),
		HostCPUMSPerJob: round(ms(end.cpu-start.cpu)/float64(n), 1),
		TokensPerJob:    round(float64(tokens)/float64(n), 1),
	}
	o.DeviceBusyOverall = fraction(end.meter.Sub(start.meter).Busy, wall, s.chips)
	to := end // the whole run, unless there was a backlog to measure
	if backlogEnd >= 1 {
		to = backlog
	} else {
		r.log.Warn("no more jobs than the Runners hold: the figures under backlog are the whole run's", "scenario", s.name)
	}
	during, span := to.meter.Sub(start.meter), to.at.Sub(start.at)
	o.BacklogS = round(span.Seconds(), 2)
	if tokens > 0 {
		answered := float64(during.Sequences+during.Rows) / (float64(tokens) / float64(n)) // one token per prefill and per row
		o.JobsPerS = round(answered/span.Seconds(), 2)
		o.JobsPerSPerChip = round(answered/span.Seconds()/float64(s.chips), 2)
	}
	o.DeviceBusy = fraction(during.Busy, span, s.chips)
	o.SimWakeLate = fraction(during.Late, span, s.chips)
	o.DeviceBoundJobsPerS = round(deviceBound(r.base.Sim, s, o.TokensPerJob), 2)
	return o, nil
}

// deviceBound is the jobs per second the chips could do with the host taking no time:
// vision, prefill of the served prompt (512 tokens padded) and the answer's decode steps,
// each step shared by batch sequences.
func deviceBound(c sim.Costs, s scenario, tokens float64) float64 {
	perJob := c.VisionCost(24, 44) + c.PrefillCost(sim.ReferencePrefill) +
		time.Duration((tokens-1)*float64(c.StepCost(s.batch))/float64(s.batch))
	if perJob <= 0 {
		return 0
	}
	return float64(s.chips) / perJob.Seconds()
}

// fraction is d as a share of chips x wall.
func fraction(d, wall time.Duration, chips int) float64 {
	if wall <= 0 {
		return 0
	}
	return round(float64(d)/float64(wall)/float64(chips), 4)
}

// cpuTime is the process's user and system CPU time so far: the worker, its NATS server
// and the load generator all run in this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile is the nearest-rank percentile (0 when empty).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// landmarkWatch is the worker's Landmarks writer: done closes at the startup-complete line.
type landmarkWatch struct {
	once sync.Once
	done chan struct{}
}

func newLandmarkWatch() *landmarkWatch { return &landmarkWatch{done: make(chan struct{})} }

func (l *landmarkWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), httpcompat.StartupCompleteLine) {
		l.once.Do(func() { close(l.done) })
	}
	return len(p), nil
}
