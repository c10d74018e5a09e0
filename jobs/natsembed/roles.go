package natsembed

import (
	"github.com/nats-io/nats-server/v2/server"
)

// Role is what one kind of NATS identity may do. The producer's and the worker's are the
// permissions deploy/ ships for an external cluster too (a test compares them).
type Role string

const (
	// RoleProducer publishes jobs, reads results and job state, and requests cancels:
	// `submit` with its run, status, batches and cancel commands.
	RoleProducer Role = "producer"
	// RoleWorker runs jobs: it owns the streams, the consumer and the state bucket.
	RoleWorker Role = "worker"
	// RoleOperator administers: dead-letter replay, purges, anything JetStream offers.
	RoleOperator Role = "operator"
)

// WorkerInboxPrefix is the inbox of the worker's connections (replies to its JetStream
// requests, the jobs it pulls). It is not _INBOX, so that no producer, which may only
// subscribe below _INBOX, can listen to what the worker is sent.
const WorkerInboxPrefix = "_LA_WORKER_INBOX"

// The streams, bucket and consumer of the wire contract (jobs/schema.go names them; this
// package does not import jobs, which imports it in tests).
const (
	jobsStream    = "LA_JOBS"
	resultsStream = "LA_RESULTS"
	dlqStream     = "LA_DLQ"
	stateBucket   = "LA_JOB_STATE"
	stateStream   = "KV_" + stateBucket
	workersName   = "la-workers"
)

// Permissions is what an identity of role r may publish and subscribe to; nil for the
// operator, who may do anything.
func (r Role) Permissions() *server.Permissions {
	switch r {
	case RoleProducer:
		return producerPermissions()
	case RoleWorker:
		return workerPermissions()
	}
	return nil
}

// producerPermissions: publish jobs (la.jobs.>) and cancel requests (cancel.<id> keys of
// the state bucket); read results, job state and the queue through the JetStream API;
// receive replies on _INBOX. Everything else is refused, in particular: deleting,
// purging or changing a stream or the workers' consumer, writing a job's state (<id>
// keys), publishing results or dead letters, and reading the dead-letter queue or the
// worker's inbox.
func producerPermissions() *server.Permissions {
	api := "$JS.API."
	allow := []string{
		"la.jobs.>",
		"$KV." + stateBucket + ".cancel.>",
		api + "INFO",
	}
	for _, s := range []string{jobsStream, resultsStream, dlqStream, stateStream} {
		allow = append(allow, api+"STREAM.INFO."+s)
	}
	// Reading messages: results (status, collecting a batch), state (status), the queue
	// (cancelling a batch's queued jobs).
	for _, s := range []string{jobsStream, resultsStream, stateStream} {
		allow = append(allow, api+"STREAM.MSG.GET."+s, api+"DIRECT.GET."+s, api+"DIRECT.GET."+s+".>")
	}
	// Ordered (ephemeral) consumers on results and state: submit collects results and
	// lists the state bucket's keys with them.
	for _, s := range []string{resultsStream, stateStream} {
		allow = append(allow,
			api+"CONSUMER.CREATE."+s, api+"CONSUMER.CREATE."+s+".>",
			api+"CONSUMER.INFO."+s+".*", api+"CONSUMER.DELETE."+s+".*",
			api+"CONSUMER.MSG.NEXT."+s+".*", "$JS.FC."+s+".>")
	}
	// The workers' consumer may be looked at (its backlog), not changed.
	allow = append(allow, api+"CONSUMER.INFO."+jobsStream+"."+workersName)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
}

// workerPermissions: the JetStream API as a whole and every key-value bucket (the worker
// creates, and recreates when they disappear, the LA_* streams, the consumer, the state
// bucket and whatever keeps the max-deliveries advisories), the wire contract's subjects,
// acks and flow control; replies on its own inbox and the JetStream advisories. This is
// JetStream admin of the account: the worker is trusted; what the roles protect it from
// are producers.
func workerPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			"$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "la.>",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			WorkerInboxPrefix + ".>", "_INBOX.>", "$JS.EVENT.ADVISORY.>", "la.>",
		}},
	}
}
