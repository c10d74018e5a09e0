package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/locateanything/detect/engine"
)

// This project's own rules for its tt-model.yaml, on top of the schema's (Validate).
const (
	// WeightsRepo and WeightsRevision pin the checkpoint the TT-NN recipe was validated on.
	WeightsRepo     = "nvidia/LocateAnything-3B"
	WeightsRevision = "c32291ca5e996f5a7a485845b4f57a233936bba0"
	// Hardware and MeshDevice: one p150a card, mesh 1x1.
	Hardware   = "p150a"
	MeshDevice = "P150"
	// MeshShapeEnv is the variable the ttnn backend reads the mesh shape from, as the upstream
	// server does (docs/background.md, "Knobs").
	MeshShapeEnv = "TT_MESH_SHAPE"
	// AdapterModule is the ttnn backend's adapter (engine/ttnn), shipped beside the launcher.
	AdapterModule = "la_ttnn_adapter"
	// WorkerPath is where extra_code stages the Go worker binary; the image copies code/
	// to /opt/tt-metal, so the launcher's default LA_WORKER_BIN is /opt/tt-metal/<WorkerPath>.
	WorkerPath = "la_worker/la-worker"
)

var (
	defaultWorkerBinRE = regexp.MustCompile(`(?m)^DEFAULT_WORKER_BIN = "([^"]+)"$`)
	asgiAppRE          = `(?m)^(async\s+def\s+%[1]s\s*\(|%[1]s\s*=)`
)

// CheckLocateAnything applies this project's rules to a manifest whose local extra_code
// roots are relative to repoRoot: the kind, arch, pinned weights, hardware and mesh, the
// runtime the ttnn backend expects, the card, and that runtime.app and the worker binary
// are shipped by extra_code where the launcher looks for them.
func CheckLocateAnything(m *Manifest, repoRoot string) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if m.Kind != KindTTDiTServer {
		bad("kind %q: the launcher is a uvicorn app, so the kind must be %s", m.Kind, KindTTDiTServer)
	}
	if m.Arch != "blackhole" {
		bad("arch %q: must be blackhole", m.Arch)
	}
	if m.Weights.Repo != WeightsRepo || m.Weights.Revision != WeightsRevision {
		bad("weights %s@%s: must be pinned to %s@%s", m.Weights.Repo, m.Weights.Revision, WeightsRepo, WeightsRevision)
	}
	if m.Serve.Hardware != Hardware || m.Serve.MeshDevice != MeshDevice {
		bad("serve: hardware %q, mesh_device %q: must be %q and %q", m.Serve.Hardware, m.Serve.MeshDevice, Hardware, MeshDevice)
	}
	if m.Serve.Env["LA_ENGINE"] != string(engine.BackendTTNN) {
		bad("serve.env.LA_ENGINE %q: must be ttnn on a Blackhole card", m.Serve.Env["LA_ENGINE"])
	}
	if m.Runtime.MeshShapeEnv != MeshShapeEnv {
		bad("runtime.mesh_shape_env %q: must be %s (what the ttnn backend reads)", m.Runtime.MeshShapeEnv, MeshShapeEnv)
	}
	if !containsPrefix(m.Runtime.Packages, "uvicorn") {
		bad("runtime.packages: must include uvicorn (it launches the app)")
	}
	if m.Card == nil || strings.TrimSpace(m.Card.Description) == "" || strings.TrimSpace(m.Card.Quickstart) == "" {
		bad("card.description and card.quickstart: both are required (they become the published README)")
	}
	if len(m.Verify) == 0 {
		bad("verify: at least one build-time assertion is required (that the worker binary is in the image)")
	}
	if err := checkShipped(m, repoRoot); err != nil {
		errs = append(errs, err)
	}
	if err := checkAdapterShipped(m, repoRoot); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkShipped finds the local extra_code root that ships runtime.app's package, checks
// the module file defines the ASGI attribute, and that the same root ships the worker at
// the path the launcher execs by default.
func checkShipped(m *Manifest, repoRoot string) error {
	module, attr, ok := strings.Cut(m.Runtime.App, ":")
	if !ok {
		return fmt.Errorf("runtime.app %q: not module:attribute", m.Runtime.App)
	}
	top := strings.SplitN(module, ".", 2)[0]
	for _, e := range m.Source.ExtraCode {
		if e.Root.Path == "" || !contains(e.Paths, top) {
			continue
		}
		root := filepath.Join(repoRoot, filepath.FromSlash(e.Root.Path))
		file := filepath.Join(root, filepath.FromSlash(strings.ReplaceAll(module, ".", "/"))+".py")
		src, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("runtime.app %q: %w", m.Runtime.App, err)
		}
		if !regexp.MustCompile(fmt.Sprintf(asgiAppRE, regexp.QuoteMeta(attr))).Match(src) {
			return fmt.Errorf("runtime.app %q: %s defines no %s", m.Runtime.App, file, attr)
		}
		if !contains(e.Paths, strings.SplitN(WorkerPath, "/", 2)[0]) {
			return fmt.Errorf("source.extra_code root %q ships %s but not the worker directory %s", e.Root.Path, top, filepath.Dir(WorkerPath))
		}
		g := defaultWorkerBinRE.FindSubmatch(src)
		if g == nil {
			return fmt.Errorf("%s: no DEFAULT_WORKER_BIN line", file)
		}
		if want := "/opt/tt-metal/" + WorkerPath; string(g[1]) != want {
			return fmt.Errorf("%s: DEFAULT_WORKER_BIN is %s, but the image ships the worker at %s", file, g[1], want)
		}
		return nil
	}
	return fmt.Errorf("runtime.app %q: no local source.extra_code root ships package %q", m.Runtime.App, top)
}

// checkAdapterShipped finds the local extra_code root that ships the adapter module at the
// top of code/ (so it is importable from /opt/tt-metal) and checks the file is there.
func checkAdapterShipped(m *Manifest, repoRoot string) error {
	file := AdapterModule + ".py"
	for _, e := range m.Source.ExtraCode {
		if e.Root.Path == "" || !contains(e.Paths, file) {
			continue
		}
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(e.Root.Path), file)); err != nil {
			return fmt.Errorf("source.extra_code ships %s from %q: %w", file, e.Root.Path, err)
		}
		return nil
	}
	return fmt.Errorf("no source.extra_code root ships the ttnn adapter %s", file)
}

func containsPrefix(list []string, name string) bool {
	for _, x := range list {
		rest, ok := strings.CutPrefix(x, name)
		if ok && (rest == "" || strings.ContainsAny(rest[:1], "=<>![ ;~")) {
			return true
		}
	}
	return false
}
