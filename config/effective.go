package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/locateanything/detect/engine"
)

// Effective lists the worker's settings as `worker config` shows them: Settings, with each
// variable whose 0 or empty value means "derived" showing the value in effect instead
// (Source "derived"). environ is the process environment, as for Settings.
func (c Worker) Effective(environ []string) []Setting {
	out := Settings(c, environ)
	derived := c.derived()
	for i, s := range out {
		if v, ok := derived[s.Name]; ok {
			out[i].Value, out[i].Source = v, "derived"
		}
	}
	return out
}

// derived is the value in effect of each variable left at its "derived" value (0 or
// empty), as the component that derives it does: the engine's settings by the engine's
// own derivations (engine.Settings), so that `worker config` shows them without opening
// the engine and cannot disagree with it.
func (c Worker) derived() map[string]string {
	d := map[string]string{}
	e := c.Engine
	if c.Runner.Prefetch == 0 {
		d["LA_PREFETCH"] = fmt.Sprintf("%d (LA_MAX_BATCH + 2)", c.RunnerPrefetch())
	}
	if c.Runner.MaxDecodedBytes == 0 {
		d["LA_MAX_DECODED_BYTES"] = fmt.Sprintf("%d (a quarter of the memory the worker may use)", c.Runner.DecodedBytes())
	}
	if e.Threads == 0 && e.Backend == engine.BackendCPU {
		d["LA_THREADS"] = strconv.Itoa(e.ThreadCount()) + " (one per core)"
	}
	if e.InTokenLimit == 0 {
		if n := e.InTokens(0); n > 0 { // the same whatever the checkpoint says
			d["LA_IN_TOKEN_LIMIT"] = strconv.Itoa(n) + " (the served limit)"
		} else {
			d["LA_IN_TOKEN_LIMIT"] = fmt.Sprintf("min(%d, the checkpoint's)", engine.ServedInTokenLimit)
		}
	}
	if e.CanonGrid == "" {
		if g := e.CanonGridSetting(); g != "" {
			d["LA_CANON_GRID"] = g + " (each image's own grid)"
		} else {
			d["LA_CANON_GRID"] = "from LA_CANON_ASPECT " + e.CanonAspect + " at open"
		}
	}
	if c.Runner.WorkerName == "" {
		d["LA_WORKER_NAME"] = HostWorkerName("<pid>")
	}
	return d
}

// HostWorkerName is the worker name LA_WORKER_NAME leaves to be derived: the host name,
// its dots as dashes, and the process id.
func HostWorkerName(pid string) string {
	host, _ := os.Hostname()
	return strings.ReplaceAll(host, ".", "-") + "-" + pid
}
