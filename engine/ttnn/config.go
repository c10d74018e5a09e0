// Package ttnn holds the settings of the Blackhole backend's Python adapter
// (la_ttnn_adapter.py in this directory, loaded by the C bridge in engine/native): every
// knob the adapter runs with, handed to it as the option lines of the C ABI, so that it
// reads no environment and states no default of its own.
package ttnn

import (
	"strconv"
	"strings"

	"github.com/locateanything/detect/internal/settings"
)

// Config is the adapter's settings. Each field's `envconfig` tag is its variable,
// `default` its default and `desc` its meaning (package config embeds the type in the
// worker's configuration and reads it from the environment).
type Config struct {
	Precision       string `envconfig:"LA_PREC" default:"accuracy" desc:"ttnn precision: accuracy or bfp8attn"`
	Trace           bool   `envconfig:"LA_TRACE" default:"true" desc:"traced decode on the chip (ttnn)"`
	TraceRegionSize int    `envconfig:"LA_TRACE_REGION_SIZE" default:"50000000" desc:"bytes of device memory for the decode trace (ttnn)"`
	WarmupRuns      int    `envconfig:"LA_WARMUP_RUNS" default:"2" desc:"warm-up runs before the worker is ready (ttnn)"`
	WarmupDecode    int    `envconfig:"LA_WARMUP_DECODE_STEPS" default:"4" desc:"decode steps of each warm-up run (ttnn)"`
	MeshShape       string `envconfig:"TT_MESH_SHAPE" default:"1x1" desc:"device mesh RxC (ttnn)"`
	DeviceID        string `envconfig:"TT_DEVICE_ID" desc:"physical device number (ttnn); empty = the default"`

	PythonLib  string `envconfig:"LA_PYTHON_LIB" desc:"libpython the ttnn backend loads; empty = the default"`
	PythonSite string `envconfig:"LA_PYTHON_SITE" desc:"':'-separated site directories of the ttnn adapter's Python"`
	Adapter    string `envconfig:"LA_TTNN_ADAPTER" default:"la_ttnn_adapter" desc:"Python module of the ttnn adapter"`
	Path       string `envconfig:"LA_TTNN_PATH" desc:"directory holding the ttnn adapter"`
}

// Precisions are the values of LA_PREC the adapter implements.
var Precisions = []string{"accuracy", "bfp8attn"}

// Validate reports every setting that makes no sense, each naming its variable.
func (c Config) Validate() error {
	var v settings.Check
	v.OneOf("LA_PREC", c.Precision, Precisions...)
	v.Positive("LA_TRACE_REGION_SIZE", int64(c.TraceRegionSize))
	v.Positive("LA_WARMUP_RUNS", int64(c.WarmupRuns))
	v.Positive("LA_WARMUP_DECODE_STEPS", int64(c.WarmupDecode))
	if c.DeviceID != "" && strings.Trim(c.DeviceID, "0123456789") != "" {
		v.Add("TT_DEVICE_ID is %q, want a device number", c.DeviceID)
	}
	return v.Err()
}

// AdapterOptions are the option lines the backend hands the adapter: every knob of the
// adapter. llmDir is the extracted LLM (provision/extract); the pipeline adds canon_grid,
// the grid the host side resizes for.
func (c Config) AdapterOptions(llmDir string) map[string]string {
	return map[string]string{
		"python_lib":          c.PythonLib,
		"adapter":             c.Adapter,
		"path":                c.Path,
		"python_site":         c.PythonSite,
		"llm_dir":             llmDir,
		"precision":           c.Precision,
		"trace":               boolOption(c.Trace),
		"trace_region_size":   strconv.Itoa(c.TraceRegionSize),
		"warmup_runs":         strconv.Itoa(c.WarmupRuns),
		"warmup_decode_steps": strconv.Itoa(c.WarmupDecode),
		"mesh_shape":          c.MeshShape,
		"device_id":           c.DeviceID,
	}
}

func boolOption(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
