package deploy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// dockerStage is one FROM ... AS name section of a Dockerfile, its instructions in order.
type dockerStage struct {
	from, name string
	lines      []string
}

func readDockerfile(t *testing.T, file string) []dockerStage {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var cont string
	for _, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cont == "") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		f := strings.Fields(line)
		if len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
			st := dockerStage{from: f[1]}
			if len(f) >= 4 && strings.EqualFold(f[2], "AS") {
				st.name = f[3]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	return stages
}

func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t, "Dockerfile")
	byName := map[string]dockerStage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.from, "debian:") {
		t.Errorf("the default (last) stage is FROM %s, want a Debian runtime", final.from)
	}
	text := strings.Join(final.lines, "\n")
	if !strings.Contains(text, "libopenblas0") {
		t.Error("the runtime stage does not install libopenblas0")
	}
	var user, entrypoint string
	for _, l := range final.lines {
		if k, v, _ := strings.Cut(l, " "); strings.EqualFold(k, "USER") {
			user = strings.TrimSpace(v)
		} else if strings.EqualFold(k, "ENTRYPOINT") {
			entrypoint = strings.TrimSpace(v)
		}
	}
	if user == "" || user == "root" || user == "0" {
		t.Errorf("the runtime runs as %q, want a non-root user", user)
	}
	var argv []string
	if err := json.Unmarshal([]byte(entrypoint), &argv); err != nil || len(argv) == 0 {
		t.Errorf("ENTRYPOINT %q is not the exec form (the worker must be PID 1 to get SIGTERM)", entrypoint)
	}
	for _, name := range []string{"build", "build-jammy", "tt-model-worker"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("no stage %q", name)
		}
	}
	if from := byName["build-jammy"].from; from != "ubuntu:22.04" {
		t.Errorf("build-jammy is FROM %s; the tt-model image's runtime is ubuntu:22.04 (tt-model.yaml source.ubuntu)", from)
	}
	for _, l := range final.lines {
		if f := strings.Fields(l); len(f) >= 3 && strings.EqualFold(f[0], "COPY") && strings.Contains(l, "/src/testdata/") {
			src := strings.TrimPrefix(f[len(f)-2], "/src/")
			if _, err := os.Stat("../" + src); err != nil {
				t.Errorf("the image copies %s, which the repository does not have", src)
			}
		}
	}
}

// TestDockerfileStampsTheVersion: every go build of a binary in the Dockerfile sets the
// version and commit (build arguments, declared in its stage) with -ldflags, since the
// build context has no .git for the Go toolchain to stamp them from.
func TestDockerfileStampsTheVersion(t *testing.T) {
	const pkg = "github.com/locateanything/detect/internal/version"
	builds := 0
	for _, st := range readDockerfile(t, "Dockerfile") {
		args := map[string]bool{}
		for _, l := range st.lines {
			if f := strings.Fields(l); len(f) == 2 && strings.EqualFold(f[0], "ARG") {
				args[f[1]] = true
			}
			if !strings.Contains(l, "go build") {
				continue
			}
			builds += strings.Count(l, "go build")
			for _, want := range []string{"-ldflags", "-X " + pkg + ".version=${VERSION}", "-X " + pkg + ".commit=${COMMIT}"} {
				if !strings.Contains(l, want) {
					t.Errorf("stage %s: %q lacks %q", st.name, l, want)
				}
			}
			if !args["VERSION"] || !args["COMMIT"] {
				t.Errorf("stage %s builds without declaring ARG VERSION and ARG COMMIT", st.name)
			}
		}
	}
	if builds < 3 {
		t.Errorf("%d go builds found, want the worker and submit in build and the worker in build-jammy", builds)
	}
}
