// Package deploy holds no code. Its directory carries the deployment files (compose/,
// kubernetes/, systemd/, Dockerfile; see README.md) and its tests check them: every YAML
// parses and has what the worker needs, the NATS cluster's routes agree, the stop grace
// outlasts the worker's drain, and `systemd-analyze verify` accepts the unit.
package deploy
