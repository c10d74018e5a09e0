package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/locateanything/detect/config"
)

// readYAML decodes every document of a YAML file into generic maps (merge keys resolved).
func readYAML(t *testing.T, file string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML documents", file)
	}
	return docs
}

// at walks a path of map keys and list indexes ("spec", "template", 0, ...) through a
// decoded document; it fails the test with the path when something is missing.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for i, p := range path {
		switch key := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a mapping at %v", path[:i+1], path[:i])
			}
			if v, ok = m[key]; !ok {
				t.Fatalf("%v: missing", path[:i+1])
			}
		case int:
			l, ok := v.([]any)
			if !ok || key >= len(l) {
				t.Fatalf("%v: no item %d", path[:i+1], key)
			}
			v = l[key]
		}
	}
	return v
}

// str is at(...) for a string value.
func str(t *testing.T, v any, path ...any) string {
	t.Helper()
	s, ok := at(t, v, path...).(string)
	if !ok {
		t.Fatalf("%v: %v is not a string", path, at(t, v, path...))
	}
	return s
}

// list is at(...) for a list value.
func list(t *testing.T, v any, path ...any) []any {
	t.Helper()
	l, ok := at(t, v, path...).([]any)
	if !ok {
		t.Fatalf("%v: not a list", path)
	}
	return l
}

// has reports whether the path exists.
func has(v any, path ...string) bool {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[p]; !ok {
			return false
		}
	}
	return true
}

// stringMap turns a decoded mapping of scalars into strings (YAML may decode "1" as 1).
func stringMap(t *testing.T, v any) map[string]string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not a mapping", v)
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out
}

// workerDrain is the longest a stopping worker may take with this environment: the HTTP
// drain (LA_HTTP_SHUTDOWN_TIMEOUT) followed by the jobs' grace (LA_GRACE), each at its
// default when unset. Counting them one after the other is the safe side.
func workerDrain(t *testing.T, env map[string]string) time.Duration {
	t.Helper()
	get := func(name string, def time.Duration) time.Duration {
		s, ok := env[name]
		if !ok {
			return def
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, s, err)
		}
		return d
	}
	return get("LA_HTTP_SHUTDOWN_TIMEOUT", workerDefault(t, "LA_HTTP_SHUTDOWN_TIMEOUT")) + get("LA_GRACE", workerDefault(t, "LA_GRACE"))
}

// workerDefault is the default of one of the worker's duration settings, read from the
// configuration tree (package config), so these tests follow the worker when it changes.
func workerDefault(t *testing.T, envName string) time.Duration {
	t.Helper()
	for _, setting := range config.Settings(config.Worker{}, nil) {
		if setting.Name != envName {
			continue
		}
		d, err := time.ParseDuration(setting.Default)
		if err != nil {
			t.Fatalf("%s default %q: %v", envName, setting.Default, err)
		}
		return d
	}
	t.Fatalf("the worker has no setting %s", envName)
	return 0
}

// checkVariables fails for each LA_* name in env that the worker does not read: a typo in
// a deployment file is otherwise a setting the worker refuses at start-up.
func checkVariables(t *testing.T, where string, env map[string]string) {
	t.Helper()
	known := map[string]bool{}
	for _, name := range append(config.Names(config.Worker{}), config.OtherTools()...) {
		known[name] = true
	}
	for name := range env {
		if strings.HasPrefix(name, "LA_") && !known[name] {
			t.Errorf("%s sets %s, which the worker does not read", where, name)
		}
	}
}

// portOf is the port of a listen address such as ":20000" or "0.0.0.0:9464".
func portOf(t *testing.T, addr string) string {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		t.Fatalf("listen address %q has no port", addr)
	}
	return addr[i+1:]
}

// httpPort is the port the worker serves HTTP on when started with command: uvicorn's
// --port when the command is the tt-model launch through la_launcher, else LA_HTTP_ADDR's.
func httpPort(t *testing.T, command []any, env map[string]string) string {
	t.Helper()
	var args []string
	for _, a := range command {
		args = append(args, fmt.Sprint(a))
	}
	if !strings.Contains(strings.Join(args, " "), "uvicorn") {
		return portOf(t, env["LA_HTTP_ADDR"])
	}
	if app := manifestApp(t); args[len(args)-1] != app {
		t.Errorf("command %v serves %q; tt-model.yaml's runtime.app is %q", args, args[len(args)-1], app)
	}
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--port="); ok {
			return v
		}
		if a == "--port" && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("command %v starts uvicorn without --port", args)
	return ""
}

// manifestApp is runtime.app of tt-model.yaml, the launcher module the images carry.
func manifestApp(t *testing.T) string {
	t.Helper()
	return str(t, readYAML(t, "../tt-model.yaml")[0], "runtime", "app")
}
