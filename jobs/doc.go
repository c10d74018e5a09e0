// Package jobs is the asynchronous path: the job and result schema, the JetStream topology
// (streams, the shared pull consumer, the state bucket), and the Runner that moves jobs from
// the queue through one chip to stored, published results.
//
// Delivery is at least once. A Runner acks a job only after its result is stored and
// published; results are keyed by job id, so a repeat is harmless, and a job whose state is
// already terminal is acked without running again.
package jobs
