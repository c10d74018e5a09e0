//go:build linux

package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSoak is the long run, gated by CHAOS_SOAK=1 (`make soak`): CHAOS_SOAK_JOBS jobs
// (default 10,000) through two workers on a 3-node JetStream cluster (R3) with images and
// results in S3, while faults are injected at random on a schedule, one at a time, about
// every CHAOS_SOAK_FAULT_EVERY (default 20 s, each gap drawn from 0.5x-1.5x), in rounds
// that hold each kind once in a random order: the "victim" worker killed with kill -9 and
// restarted after 1-5 s; a random NATS node, or the leader of LA_JOBS, killed with kill -9
// and restarted after 3-15 s; the S3 server frozen with SIGSTOP for 5-20 s, or killed and
// restarted after 2-10 s. The "steady" worker is never killed, so its RSS over the run is the
// growth figure. The publisher keeps at most CHAOS_SOAK_BACKLOG (default 20) jobs
// unanswered, so the latency is the job's, not the queue's. It ends with the same
// accounting as every scenario and prints its figures. CHAOS_SEED repeats a schedule.
func TestSoak(t *testing.T) {
	if os.Getenv("CHAOS_SOAK") != "1" {
		t.Skip("the soak runs with CHAOS_SOAK=1 (make soak)")
	}
	jobsN := envInt(t, "CHAOS_SOAK_JOBS", 10_000)
	backlog := envInt(t, "CHAOS_SOAK_BACKLOG", 20)
	every := envDuration(t, "CHAOS_SOAK_FAULT_EVERY", 20*time.Second)
	seed := uint64(envInt(t, "CHAOS_SEED", int(time.Now().UnixNano()%1_000_000)))
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("soak: %d jobs, backlog %d, a fault about every %s, CHAOS_SEED=%d", jobsN, backlog, every, seed)

	s := newScene(t)
	s.useS3()
	nodes := startCluster(t, s.ps, s.dir, 3)
	urls := clusterURLs(nodes)
	env := map[string]string{"LA_NATS_URL": urls, "LA_REPLICAS": "3"}
	steady, victim := s.worker("steady", env), s.worker("victim", env)
	steady.start(t)
	victim.start(t)
	s.connect(urls)
	start := time.Now()

	// The publisher: at most backlog jobs without a result.
	published := make(chan error, 1)
	go func() {
		for i := 0; i < jobsN; i++ {
			for i-s.resultCount() > backlog {
				time.Sleep(100 * time.Millisecond)
			}
			if err := s.publishGood("soak", i, i+1); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()

	// The steady worker's RSS, every 5 s.
	rss := &rssSamples{}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if kb, err := steady.proc.rssKB(); err == nil {
				rss.add(kb, s.resultCount())
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()

	faults := map[string]int{}
	var round []string // what is left of this round of faults
	done := false
	for !done {
		gap := time.Duration(float64(every) * (0.5 + rng.Float64()))
		select {
		case err := <-published:
			if err != nil {
				t.Fatal(err)
			}
			done = true
			continue
		case <-time.After(gap):
		}
		s.ps.checkAlive()
		if t.Failed() {
			t.FailNow()
		}
		if len(round) == 0 {
			round = slices.Clone(soakFaults)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		kind := s.soakFault(rng, round[0], nodes, victim)
		round = round[1:]
		faults[kind]++
		t.Logf("%s: %s (results so far %d of %d)", time.Since(start).Round(time.Second), kind, s.resultCount(), jobsN)
	}
	r := s.account(10 * time.Minute)
	close(stopSampling)
	<-sampled
	if kb, err := steady.proc.rssKB(); err == nil {
		rss.add(kb, s.resultCount())
	}
	steady.checkLog(t)
	victim.checkLog(t)

	total := 0
	var kinds []string
	for k, n := range faults {
		total += n
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	took := time.Since(start)
	first, last, peak := rss.summary()
	t.Logf("soak figures (CHAOS_SEED=%d):\n"+
		"  jobs            %d in %s (%.1f jobs/s)\n"+
		"  faults injected %d (%s)\n"+
		"  lost            %d\n"+
		"  duplicates      %d result messages beyond the first; %d jobs delivered more than once\n"+
		"  outcome         %s\n"+
		"  latency         p50 %s, p95 %s, p99 %s (publish to result); worker time p95 %s\n"+
		"  steady RSS      %.1f MiB after warm-up, %.1f MiB at the end (growth %+.1f MiB), peak %.1f MiB",
		seed, r.Published, took.Round(time.Second), float64(r.Published)/took.Seconds(),
		total, strings.Join(kinds, ", "), len(r.Lost), r.Duplicates, r.Redelivered, r.String(),
		percentile(r.Latencies, 50), percentile(r.Latencies, 95), percentile(r.Latencies, 99),
		percentile(r.WorkerTotals, 95), mib(first), mib(last), mib(last-first), mib(peak))
}

// The faults of the soak. Each round of five injects every kind once, in a random order.
var soakFaults = []string{"worker kill -9", "NATS node kill -9", "NATS leader kill -9", "S3 SIGSTOP", "S3 kill -9"}

// soakFault injects the fault kind, waits for it to end (the process back, the cluster's
// replicas current again), and returns its kind.
func (s *scene) soakFault(rng *rand.Rand, kind string, nodes []*natsNode, victim *worker) string {
	s.t.Helper()
	pause := func(lo, hi time.Duration) { time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo)))) }
	switch kind {
	case "worker kill -9":
		victim.kill9(s.t)
		pause(time.Second, 5*time.Second)
		victim.start(s.t)
	case "NATS node kill -9", "NATS leader kill -9":
		n := nodes[rng.IntN(len(nodes))]
		if kind == "NATS leader kill -9" {
			n = s.clusterNode(nodes, "LA_JOBS", true)
		}
		n.kill9(s.t)
		pause(3*time.Second, 15*time.Second)
		n.start(s.t)
		s.waitReplicasCurrent(nodes)
	case "S3 SIGSTOP":
		s.s3.freeze(s.t)
		pause(5*time.Second, 20*time.Second)
		s.s3.thaw(s.t)
	case "S3 kill -9":
		s.s3.kill9(s.t)
		pause(2*time.Second, 10*time.Second)
		s.s3.start(s.t)
	default:
		s.t.Fatalf("no fault %q", kind)
	}
	return kind
}

// rssSamples is the steady worker's RSS over the run.
type rssSamples struct {
	mu      sync.Mutex
	kb      []int64
	results []int
}

func (r *rssSamples) add(kb int64, results int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kb = append(r.kb, kb)
	r.results = append(r.results, results)
}

// summary is the RSS once warmed up (the first sample after 200 results), at the end,
// and at its peak, in KiB.
func (r *rssSamples) summary() (first, last, peak int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.kb) == 0 {
		return 0, 0, 0
	}
	first = r.kb[0]
	for i, n := range r.results {
		if n >= 200 {
			first = r.kb[i]
			break
		}
	}
	for _, kb := range r.kb {
		peak = max(peak, kb)
	}
	return first, r.kb[len(r.kb)-1], peak
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
