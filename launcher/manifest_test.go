package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const manifestFile = "../tt-model.yaml"

func loadRepoManifest(t *testing.T) *Manifest {
	t.Helper()
	m, err := LoadManifest(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRepoManifestFollowsSchemaAndProjectRules(t *testing.T) {
	m := loadRepoManifest(t)
	if err := m.Validate(); err != nil {
		t.Errorf("schema rules:\n%v", err)
	}
	if err := CheckLocateAnything(m, ".."); err != nil {
		t.Errorf("project rules:\n%v", err)
	}
	// spot checks that the decoder really read the file
	if m.Runtime.App != "la_launcher.app:app" || m.Serve.Port != 20000 || m.Source.TTMetal.Repo == "" {
		t.Errorf("decoded %+v", m)
	}
}

// Each mutation breaks one rule; the checks must name it.
func TestManifestRulesCatchMistakes(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Manifest)
		want   string
	}{
		{"schema", func(m *Manifest) { m.Schema = "5" }, `schema "5"`},
		{"repo not namespaced", func(m *Manifest) { m.Repo = "la" }, "repo \"la\""},
		{"name not a slug", func(m *Manifest) { m.Name = "../LA" }, "slug"},
		{"weights not namespaced", func(m *Manifest) { m.Weights.Repo = "LocateAnything-3B" }, "weights \"LocateAnything-3B\""},
		{"weights not pinned", func(m *Manifest) { m.Weights.Revision = "" }, "must be pinned"},
		{"other weights", func(m *Manifest) { m.Weights.Repo = "other/model" }, "must be pinned"},
		{"duplicate weights", func(m *Manifest) { m.AuxiliaryWeights = []Weights{{Repo: WeightsRepo}} }, "listed twice"},
		{"unknown arch", func(m *Manifest) { m.Arch = "grayskull" }, "arch \"grayskull\""},
		{"wormhole", func(m *Manifest) { m.Arch = "wormhole_b0" }, "must be blackhole"},
		{"unknown kind", func(m *Manifest) { m.Kind = "uvicorn" }, "kind \"uvicorn\""},
		{"vllm kind", func(m *Manifest) { m.Kind = "vllm-plugin" }, "must be tt-dit-server"},
		{"no tt_metal", func(m *Manifest) { m.Source.TTMetal = GitOrPath{} }, "source.tt_metal"},
		{"no code", func(m *Manifest) { m.Source.Code = nil }, "source.code"},
		{"escaping code path", func(m *Manifest) { m.Source.Code = append(m.Source.Code, "../x") }, "must not leave"},
		{"absolute extra path", func(m *Manifest) { m.Source.ExtraCode[0].Paths = []string{"/la_launcher"} }, "must be relative"},
		{"no ubuntu", func(m *Manifest) { m.Source.Ubuntu = "" }, "source.ubuntu"},
		{"app not module:attr", func(m *Manifest) { m.Runtime.App = "la_launcher.app" }, "module.path:attribute"},
		{"app not shipped", func(m *Manifest) { m.Source.ExtraCode[0].Paths = []string{"la_worker"} }, "which no source.code or source.extra_code path ships"},
		{"app attribute missing", func(m *Manifest) { m.Runtime.App = "la_launcher.app:application" }, "defines no application"},
		{"app module missing", func(m *Manifest) { m.Runtime.App = "la_launcher.server:app" }, "server.py"},
		{"worker not shipped", func(m *Manifest) { m.Source.ExtraCode[0].Paths = []string{"la_launcher"} }, "worker directory"},
		{"bad mesh env", func(m *Manifest) { m.Runtime.MeshShapeEnv = "1MESH" }, "not a valid environment variable"},
		{"other mesh env", func(m *Manifest) { m.Runtime.MeshShapeEnv = "FLUX2_MESH_SHAPE" }, "TT_MESH_SHAPE"},
		{"no uvicorn", func(m *Manifest) { m.Runtime.Packages = []string{"uvicorn-worker", "fastapi"} }, "uvicorn"},
		{"no hardware", func(m *Manifest) { m.Serve.Hardware = "" }, "hardware and mesh_device are required"},
		{"box name as hardware", func(m *Manifest) { m.Serve.Hardware = "QB2" }, "not a board label"},
		{"unknown mesh", func(m *Manifest) { m.Serve.MeshDevice = "P151" }, "mesh_device \"P151\""},
		{"mesh and hardware disagree", func(m *Manifest) { m.Serve.MeshDevice = "P150x2" }, "opens 1x2 chips but hardware \"p150a\" has 1"},
		{"other card", func(m *Manifest) { m.Serve.Hardware = "p150x2"; m.Serve.MeshDevice = "P150x2" }, "must be \"p150a\""},
		{"cpu engine", func(m *Manifest) { m.Serve.Env = map[string]string{"LA_ENGINE": "cpu"} }, "LA_ENGINE"},
		{"profiles without default", func(m *Manifest) { m.ServeProfiles = []Serve{{Name: "a"}, {Name: "b"}} }, "default_profile"},
		{"duplicate profiles", func(m *Manifest) { m.ServeProfiles = []Serve{{Name: "a"}, {Name: "a"}} }, "declared 2 times"},
		{"default names nothing", func(m *Manifest) { m.DefaultProfile = "fast" }, "names no profile"},
		{"profile overrides mesh", func(m *Manifest) { m.ServeProfiles = []Serve{{Name: "x", MeshDevice: "QB2"}} }, "opens 2x2"},
		{"no card", func(m *Manifest) { m.Card = nil }, "card.description"},
		{"no quickstart", func(m *Manifest) { m.Card.Quickstart = " " }, "card.quickstart"},
		{"adapter not shipped", func(m *Manifest) { m.Source.ExtraCode = m.Source.ExtraCode[:1] }, "ttnn adapter"},
		{"adapter missing", func(m *Manifest) { m.Source.ExtraCode[1].Root.Path = "engine" }, "la_ttnn_adapter.py"},
		{"no verify", func(m *Manifest) { m.Verify = nil }, "verify"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := loadRepoManifest(t)
			c.mutate(m)
			var msgs []string
			for _, err := range []error{m.Validate(), CheckLocateAnything(m, "..")} {
				if err != nil {
					msgs = append(msgs, err.Error())
				}
			}
			all := strings.Join(msgs, "\n")
			if !strings.Contains(all, c.want) {
				t.Errorf("want an error containing %q, got:\n%s", c.want, all)
			}
		})
	}
}

// The decoder refuses what pydantic refuses: unknown keys and an unquoted schema.
func TestLoadManifestIsStrict(t *testing.T) {
	orig, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ old, new, want string }{
		"unknown top-level key":  {"kind: tt-dit-server", "kind: tt-dit-server\nkinds: x", "field kinds not found"},
		"serve typo":             {"  port: 20000", "  prot: 20000", "field prot not found"},
		"unknown runtime key":    {"  mesh_shape_env: TT_MESH_SHAPE", "  mesh_shape_env: TT_MESH_SHAPE\n  model_dir: x", "field model_dir not found"},
		"unquoted schema":        {`schema: "5.1"`, "schema: 5.10", "quoted string"},
		"git source without ref": {"    ref: 8b98410e730\n", "", "needs both repo and ref"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(string(orig), c.old) {
				t.Fatalf("the manifest no longer contains %q; update the test", c.old)
			}
			file := filepath.Join(t.TempDir(), "tt-model.yaml")
			if err := os.WriteFile(file, []byte(strings.Replace(string(orig), c.old, c.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadManifest(file)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
}

func TestHardwareChipsAndMeshDevice(t *testing.T) {
	chips := map[string]int{"p150a": 1, "p150": 1, "p150x4": 4, "p300x2": 4, "n300": 2, "P150A": 1}
	for label, want := range chips {
		if got, ok := HardwareChips(label); !ok || got != want {
			t.Errorf("HardwareChips(%q) = %d, %v; want %d", label, got, ok, want)
		}
	}
	for _, label := range []string{"", "QB2", "p150x0", "blackhole", "p999"} {
		if got, ok := HardwareChips(label); ok {
			t.Errorf("HardwareChips(%q) = %d, want refused", label, got)
		}
	}
	meshes := map[string][2]int{"P150": {1, 1}, "QB2": {2, 2}, "(1, 4)": {1, 4}, "[2,2]": {2, 2}}
	for s, want := range meshes {
		if got, err := ParseMeshDevice(s); err != nil || got != want {
			t.Errorf("ParseMeshDevice(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseMeshDevice("p150"); err == nil {
		t.Error("ParseMeshDevice(\"p150\"): want an error (presets are case-sensitive)")
	}
}
