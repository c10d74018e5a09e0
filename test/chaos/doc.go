// Package chaos holds the chaos suite and the soak of the worker (docs/chaos.md): tests
// that run the real worker binary, real nats-server processes and a real S3 server
// (versitygw) as subprocesses, inject faults (kill -9, SIGSTOP, SIGTERM, node and leader
// loss, hostile jobs and requests) and account for every job they published.
//
// The bounded form runs with `go test ./...`; `make chaos` runs the full form
// (CHAOS_FULL=1) and `make soak` the soak (CHAOS_SOAK=1). The package has no code besides
// its tests.
package chaos
