package config

import (
	"fmt"
	"path/filepath"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/provision/weights"
	"github.com/locateanything/detect/storage"
)

// This file hands each package its part of the tree, as that package's own config type.

// EmbeddedServer is the embedded NATS server's settings, but for TLS (the certificate
// files are read at start-up) and the logger: its address, store and the credentials its
// producers and its operator must present.
func (c Worker) EmbeddedServer() natsembed.Options {
	return natsembed.Options{
		Listen: c.Embedded.Listen, StoreDir: filepath.Join(c.DataDir, "jetstream"),
		User: c.NATS.User, Password: c.NATS.Password, Token: c.NATS.Token,
		OperatorUser: c.Embedded.OperatorUser, OperatorPassword: c.Embedded.OperatorPassword,
	}
}

// JobStorage is the storage settings the worker serves jobs with: Store, with the embedded
// JetStream store (LA_DATA_DIR/jetstream) hidden from file://, whatever the roots, so no
// job reads or writes it even when the data directory lies below a root (as it does on
// the single-machine default, below the working directory).
func (c Worker) JobStorage() storage.Config {
	s := c.Storage
	s.Hidden = []string{c.EmbeddedServer().StoreDir}
	return s
}

// RunnerConfig is the Runner of chip i of a worker named name: with several chips each
// Runner is named name-chipN. Logger and Metrics are the caller's to set.
func (c Worker) RunnerConfig(name string, chip int) jobs.RunnerConfig {
	if c.Engine.Chips > 1 {
		name = fmt.Sprintf("%s-chip%d", name, chip)
	}
	r := c.Runner
	return jobs.RunnerConfig{
		Worker: name, Prefetch: c.RunnerPrefetch(), DefaultOutput: r.ResultsURL,
		MaxImageBytes: c.Storage.MaxImageBytes, RunnerTiming: r.RunnerTiming,
	}
}

// RunnerPrefetch is the job messages each Runner holds: LA_PREFETCH, or when it is 0 enough to
// fill every slot and have the next ones prepared (LA_MAX_BATCH + 2).
func (c Worker) RunnerPrefetch() int {
	if c.Runner.Prefetch == 0 {
		return c.Engine.MaxBatch + 2
	}
	return c.Runner.Prefetch
}

// Hub is where the pinned snapshot is looked for and fetched from: the weights settings,
// with LA_WEIGHTS_DIR's alias applied.
func (w Weights) Hub() weights.Options {
	o := w.Options
	o.Dir = w.Directory()
	return o
}
