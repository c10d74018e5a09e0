package ttnn

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/internal/settings"
)

// TestAdapterOptionsCarryTheirVariables: every option line the adapter reads, as its
// OPTION_VARIABLES table names them, carries the value of the variable that table names
// (canon_grid excepted: the pipeline adds it), and the C bridge's own lines are there.
func TestAdapterOptionsCarryTheirVariables(t *testing.T) {
	src, err := os.ReadFile("la_ttnn_adapter.py")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(src), "OPTION_VARIABLES = {")
	table, _, ok := strings.Cut(rest, "\n}")
	if !found || !ok {
		t.Fatal("la_ttnn_adapter.py has no OPTION_VARIABLES table")
	}
	pairs := regexp.MustCompile(`"(\w+)": "(\w+)"`).FindAllStringSubmatch(table, -1)
	if len(pairs) < 8 {
		t.Fatalf("OPTION_VARIABLES: %d entries read", len(pairs))
	}
	values := map[string]string{
		"LA_PREC": "bfp8attn", "LA_TRACE": "false", "LA_TRACE_REGION_SIZE": "123", "LA_WARMUP_RUNS": "5",
		"LA_WARMUP_DECODE_STEPS": "7", "TT_MESH_SHAPE": "2x4", "TT_DEVICE_ID": "3", "LA_PYTHON_SITE": "site-a:site-b",
		"LA_PYTHON_LIB": "libpython3.10.so", "LA_TTNN_ADAPTER": "other_adapter", "LA_TTNN_PATH": "adapters",
	}
	for k, v := range values {
		t.Setenv(k, v)
	}
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid settings refused: %v", err)
	}
	lines := c.AdapterOptions("llm")
	want := func(key, variable string) {
		t.Helper()
		v := values[variable]
		if variable == "LA_TRACE" {
			v = "0"
		}
		if got, ok := lines[key]; !ok || got != v {
			t.Errorf("option %s = %q (present %v), want %s's %q", key, got, ok, variable, v)
		}
	}
	for _, p := range pairs {
		if p[1] != "canon_grid" {
			want(p[1], p[2])
		}
	}
	want("python_lib", "LA_PYTHON_LIB")
	want("adapter", "LA_TTNN_ADAPTER")
	want("path", "LA_TTNN_PATH")
	if lines["llm_dir"] != "llm" {
		t.Errorf("llm_dir = %q", lines["llm_dir"])
	}
}

// TestValidateNamesEveryBadVariable: each setting the adapter cannot run with is refused
// by its variable's name, all at once.
func TestValidateNamesEveryBadVariable(t *testing.T) {
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	c.Precision, c.TraceRegionSize, c.WarmupRuns, c.WarmupDecode, c.DeviceID = "fast", 0, -1, 0, "x"
	errs := settings.Split(c.Validate())
	for i, name := range []string{"LA_PREC", "LA_TRACE_REGION_SIZE", "LA_WARMUP_RUNS", "LA_WARMUP_DECODE_STEPS", "TT_DEVICE_ID"} {
		if i >= len(errs) || !strings.HasPrefix(errs[i].Error(), name+" is ") {
			t.Errorf("complaint %d of %v: want one naming %s", i, errs, name)
		}
	}
}
