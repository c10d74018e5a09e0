package jobs

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/settings"
)

// TopologyConfig sets up the streams, the shared consumer and the state bucket. The
// settings are declared here (the tags: variable, default, meaning; package config reads
// them from the environment); JobsMaxAge and BackOff may be zero or empty, meaning no limit
// and no back-off.
type TopologyConfig struct {
	Replicas        int           `envconfig:"LA_REPLICAS" default:"1" desc:"replicas of the streams and the state bucket (1, 3 or 5 on a cluster)"`
	DuplicateWindow time.Duration `envconfig:"LA_DUPLICATE_WINDOW" default:"2m" desc:"LA_JOBS drops a job whose Nats-Msg-Id it saw this recently"`
	JobsMaxAge      time.Duration `envconfig:"LA_JOBS_MAX_AGE" default:"0s" desc:"how long an unconsumed job may wait; 0 = forever"`
	ResultsMaxAge   time.Duration `envconfig:"LA_RESULTS_MAX_AGE" default:"168h" desc:"how long LA_RESULTS keeps a result"`
	DLQMaxAge       time.Duration `envconfig:"LA_DLQ_MAX_AGE" default:"720h" desc:"how long LA_DLQ keeps a dead-letter record"`
	StateMaxAge     time.Duration `envconfig:"LA_STATE_MAX_AGE" default:"168h" desc:"lifetime of job state and cancel entries"`

	AckWait       time.Duration   `envconfig:"LA_ACK_WAIT" default:"60s" desc:"time a worker has between heartbeats before its job is redelivered"`
	MaxDeliver    int             `envconfig:"LA_MAX_DELIVER" default:"10" desc:"deliveries before a job is dead-lettered"`
	BackOff       []time.Duration `envconfig:"LA_BACKOFF" default:"60s,2m,5m" desc:"redelivery delays after an ack wait expires; fewer steps than LA_MAX_DELIVER"`
	MaxAckPending int             `envconfig:"LA_MAX_ACK_PENDING" default:"1024" desc:"jobs in flight across all workers"`
}

// Validate reports every setting that JetStream would refuse or that makes no sense, each
// naming its variable.
func (c TopologyConfig) Validate() error {
	var v settings.Check
	if c.Replicas < 1 || c.Replicas > 5 {
		v.Add("LA_REPLICAS is %d, want 1 to 5", c.Replicas)
	}
	v.PositiveDuration("LA_DUPLICATE_WINDOW", c.DuplicateWindow)
	v.NotNegativeDuration("LA_JOBS_MAX_AGE", c.JobsMaxAge, "no limit")
	v.PositiveDuration("LA_RESULTS_MAX_AGE", c.ResultsMaxAge)
	v.PositiveDuration("LA_DLQ_MAX_AGE", c.DLQMaxAge)
	v.PositiveDuration("LA_STATE_MAX_AGE", c.StateMaxAge)
	if c.AckWait < time.Second {
		v.Add("LA_ACK_WAIT is %s, want at least 1s", c.AckWait)
	}
	v.Positive("LA_MAX_DELIVER", int64(c.MaxDeliver))
	v.Positive("LA_MAX_ACK_PENDING", int64(c.MaxAckPending))
	for i, d := range c.BackOff {
		if d <= 0 {
			v.Add("LA_BACKOFF step %d is %s, want a positive duration", i+1, d)
		}
	}
	if len(c.BackOff) > 0 && len(c.BackOff) >= c.MaxDeliver { // JetStream refuses it, LA_MAX_DELIVER=1 included
		v.Add("LA_BACKOFF has %d steps, want fewer than LA_MAX_DELIVER (%d)", len(c.BackOff), c.MaxDeliver)
	}
	if c.JobsMaxAge > 0 && c.DuplicateWindow > c.JobsMaxAge {
		v.Add("LA_DUPLICATE_WINDOW %s is longer than LA_JOBS_MAX_AGE %s", c.DuplicateWindow, c.JobsMaxAge)
	}
	return v.Err()
}

// Topology is the JetStream side of the wire contract, ready for use. The handles address
// their streams, consumers and bucket by name, so they keep working when a Healer recreates
// what they name.
type Topology struct {
	JS       jetstream.JetStream
	Jobs     jetstream.Stream
	Results  jetstream.Stream
	DLQ      jetstream.Stream
	Consumer jetstream.Consumer
	State    *StateStore
	Config   TopologyConfig

	// Advisories keeps JetStream's max-deliveries advisories of the shared consumer until
	// a worker has dead-lettered their jobs; AdvisoryConsumer is the workers' shared
	// durable consumer of it (MaxDeliveriesWatcher).
	Advisories       jetstream.Stream
	AdvisoryConsumer jetstream.Consumer
}

// EnsureTopology checks the connected server's version (MinServerVersion), then creates or
// updates LA_JOBS, LA_RESULTS, LA_DLQ, the shared durable pull consumer, the advisory
// stream and its consumer, and the state bucket. Calling it again with the same config
// changes nothing, so every worker calls it at start-up.
func EnsureTopology(ctx context.Context, js jetstream.JetStream, cfg TopologyConfig) (*Topology, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("topology config: %w", err)
	}
	if err := CheckServerVersion(js.Conn().ConnectedServerVersion()); err != nil {
		return nil, err
	}
	t := &Topology{JS: js, Config: cfg}
	for _, part := range t.parts() {
		if err := part.ensure(ctx); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// topologyPart is one object of the topology: how to tell that it exists and how to create
// it (or update it to the configuration) when it does not. ensure is idempotent and safe
// when several workers run it at once.
type topologyPart struct {
	name   string                          // the stream, consumer or bucket name
	exists func(context.Context) error     // nil: it exists; errPartMissing (wrapped): it does not
	ensure func(ctx context.Context) error // creates or updates it, setting t's handle
}

// parts lists the objects of t in the order they must be created: a consumer after its
// stream.
func (t *Topology) parts() []topologyPart {
	cfg := t.Config
	return []topologyPart{
		t.streamPart(&t.Jobs, JobsStream, []string{JobSubjectPrefix + ">"},
			"LocateAnything detection jobs (la.jobs.<class>)", jetstream.WorkQueuePolicy, cfg.JobsMaxAge),
		t.consumerPart(&t.Consumer, JobsStream, jetstream.ConsumerConfig{
			Durable:       ConsumerName,
			Description:   "shared by every LocateAnything worker",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxDeliver:    cfg.MaxDeliver,
			BackOff:       cfg.BackOff,
			MaxAckPending: cfg.MaxAckPending,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}),
		t.streamPart(&t.Results, ResultsStream, []string{ResultSubjectPrefix + ">"},
			"LocateAnything results (la.results.<batch>.<id>)", jetstream.LimitsPolicy, cfg.ResultsMaxAge),
		t.streamPart(&t.DLQ, DLQStream, []string{DLQSubjectPrefix + ">"},
			"LocateAnything dead-lettered jobs (la.dlq.<id>)", jetstream.LimitsPolicy, cfg.DLQMaxAge),
		// An advisory is kept as long as its job message can be (LA_JOBS's max age).
		t.streamPart(&t.Advisories, AdvisoryStream, []string{MaxDeliveriesSubject},
			"max-deliveries advisories of "+JobsStream+"/"+ConsumerName+" until their jobs are dead-lettered",
			jetstream.WorkQueuePolicy, cfg.JobsMaxAge),
		t.consumerPart(&t.AdvisoryConsumer, AdvisoryStream, jetstream.ConsumerConfig{
			Durable:       AdvisoryConsumerName,
			Description:   "shared by every LocateAnything worker's max-deliveries watcher",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxDeliver:    -1, // an advisory is retried until its job is dead-lettered
			MaxAckPending: cfg.MaxAckPending,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}),
		t.bucketPart(),
	}
}

// streamPart is one of the file-backed streams, bound to subjects.
func (t *Topology) streamPart(handle *jetstream.Stream, name string, subjects []string, description string,
	retention jetstream.RetentionPolicy, maxAge time.Duration) topologyPart {
	return topologyPart{
		name: name,
		exists: func(ctx context.Context) error {
			_, err := t.JS.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("stream %s: %w", name, errPartMissing)
			}
			if err != nil {
				return fmt.Errorf("look up stream %s: %w", name, err)
			}
			return nil
		},
		ensure: func(ctx context.Context) error {
			s, err := t.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
				Name:        name,
				Description: description,
				Subjects:    subjects,
				Retention:   retention,
				Storage:     jetstream.FileStorage,
				Replicas:    t.Config.Replicas,
				Duplicates:  t.Config.DuplicateWindow,
				MaxAge:      maxAge,
			})
			if err != nil {
				return fmt.Errorf("create stream %s: %w", name, err)
			}
			if *handle == nil {
				*handle = s
			}
			return nil
		},
	}
}

// consumerPart is a durable pull consumer of stream.
func (t *Topology) consumerPart(handle *jetstream.Consumer, stream string, cc jetstream.ConsumerConfig) topologyPart {
	return topologyPart{
		name: cc.Durable,
		exists: func(ctx context.Context) error {
			_, err := t.JS.Consumer(ctx, stream, cc.Durable)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("consumer %s on %s: %w", cc.Durable, stream, errPartMissing)
			}
			if err != nil {
				return fmt.Errorf("look up consumer %s on %s: %w", cc.Durable, stream, err)
			}
			return nil
		},
		ensure: func(ctx context.Context) error {
			c, err := t.JS.CreateOrUpdateConsumer(ctx, stream, cc)
			if err != nil {
				return fmt.Errorf("create consumer %s on %s: %w", cc.Durable, stream, err)
			}
			if *handle == nil {
				*handle = c
			}
			return nil
		},
	}
}

// bucketPart is the state bucket.
func (t *Topology) bucketPart() topologyPart {
	return topologyPart{
		name: StateBucket,
		exists: func(ctx context.Context) error {
			_, err := t.JS.KeyValue(ctx, StateBucket)
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				return fmt.Errorf("key-value bucket %s: %w", StateBucket, errPartMissing)
			}
			if err != nil {
				return fmt.Errorf("look up key-value bucket %s: %w", StateBucket, err)
			}
			return nil
		},
		ensure: func(ctx context.Context) error {
			kv, err := t.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket:      StateBucket,
				Description: "LocateAnything job state (<id>) and cancel requests (cancel.<id>)",
				History:     1,
				TTL:         t.Config.StateMaxAge,
				Storage:     jetstream.FileStorage,
				Replicas:    t.Config.Replicas,
			})
			if err != nil {
				return fmt.Errorf("create key-value bucket %s: %w", StateBucket, err)
			}
			if t.State == nil {
				t.State = &StateStore{kv: kv}
			}
			return nil
		},
	}
}

// MinServerVersion is the oldest nats-server EnsureTopology accepts (docs/worker.md, "Server
// version"): a 2.9 server (2.9.10) was seen keeping jobs it had already acknowledged in
// LA_JOBS after a kill -9, so they ran again.
const MinServerVersion = "2.10.0"

// serverVersionRE reads major.minor.patch and an optional pre-release suffix.
var serverVersionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// CheckServerVersion reports an error naming both versions when found, the version a server
// announces ("2.10.7", "2.11.0-RC.1"), is older than MinServerVersion or is no version. A
// pre-release of a version counts as older than that version.
func CheckServerVersion(found string) error {
	older, err := versionOlder(found, MinServerVersion)
	if err != nil {
		return fmt.Errorf("nats-server version %q: %w; %s or newer is required", found, err, MinServerVersion)
	}
	if older {
		return fmt.Errorf("nats-server %s is too old: %s or newer is required (docs/worker.md, \"Server version\")", found, MinServerVersion)
	}
	return nil
}

// versionOlder reports whether version a comes before version b.
func versionOlder(a, b string) (bool, error) {
	pa, err := parseVersion(a)
	if err != nil {
		return false, err
	}
	pb, err := parseVersion(b)
	if err != nil {
		return false, err
	}
	for i := range 3 {
		if pa.num[i] != pb.num[i] {
			return pa.num[i] < pb.num[i], nil
		}
	}
	return pa.pre && !pb.pre, nil
}

type version struct {
	num [3]int
	pre bool // a pre-release (-beta.1, -RC.2) of num
}

func parseVersion(s string) (version, error) {
	m := serverVersionRE.FindStringSubmatch(s)
	if m == nil {
		return version{}, errors.New("not a major.minor.patch version")
	}
	var v version
	for i := range 3 {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return version{}, fmt.Errorf("version part %q: %w", m[i+1], err)
		}
		v.num[i] = n
	}
	v.pre = m[4] != ""
	return v, nil
}
