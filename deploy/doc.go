// Package deploy holds no code. Its directory carries the deployment files (compose/,
// kubernetes/, systemd/, Dockerfile, the Grafana dashboard in grafana/ and the alert
// rules in prometheus/; see README.md) and its tests check them: every YAML parses and has
// what the worker needs, the NATS cluster's routes agree, the stop grace outlasts the
// worker's drain, `systemd-analyze verify` accepts the unit, and the dashboard and alert
// rules name only series the worker serves.
package deploy
