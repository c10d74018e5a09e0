// Package launcher checks what tt-model needs to start the worker on a Blackhole card: the
// container manifest tt-model.yaml, and (in its tests) the Python shim la_launcher that
// turns tt-model's uvicorn command into the Go worker.
//
// The manifest rules mirror tt-model-manager's authoring schema 5.1
// (src/tt_kernel/container_manifest.py and src/tt_kernel/launchers.py of
// tenstorrent/tt-model-manager), restated here so a mistake is caught by `go test` instead of
// an hours-long `tt-model package`. Rules that are this project's own choices, not the
// schema's, are in CheckLocateAnything.
package launcher

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Manifest is an authored tt-model.yaml. Unknown keys are refused when loading, as the
// schema does (pydantic extra="forbid").
type Manifest struct {
	Schema           versionString `yaml:"schema"`
	Repo             string        `yaml:"repo"`
	Name             string        `yaml:"name"`
	Weights          Weights       `yaml:"weights"`
	AuxiliaryWeights []Weights     `yaml:"auxiliary_weights"`
	Kind             string        `yaml:"kind"`
	Arch             string        `yaml:"arch"`
	Source           Source        `yaml:"source"`
	Image            *Image        `yaml:"image"`
	Runtime          Runtime       `yaml:"runtime"`
	Serve            Serve         `yaml:"serve"`
	ServeProfiles    []Serve       `yaml:"serve_profiles"`
	DefaultProfile   string        `yaml:"default_profile"`
	Card             *Card         `yaml:"card"`
	Verify           []string      `yaml:"verify"`
}

// Weights is a Hugging Face repo id, or a mapping that pins a revision.
type Weights struct {
	Repo           string   `yaml:"repo"`
	Revision       string   `yaml:"revision"`
	AllowPatterns  []string `yaml:"allow_patterns"`
	IgnorePatterns []string `yaml:"ignore_patterns"`
}

// UnmarshalYAML accepts both `weights: org/name` and `weights: {repo: ..., revision: ...}`.
func (w *Weights) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		w.Repo = n.Value
		return nil
	}
	type plain Weights
	return n.Decode((*plain)(w))
}

// Source holds the build-time inputs.
type Source struct {
	TTMetal   GitOrPath   `yaml:"tt_metal"`
	Code      []string    `yaml:"code"`
	ExtraCode []ExtraCode `yaml:"extra_code"`
	Ubuntu    string      `yaml:"ubuntu"`
	Python    string      `yaml:"python"`
}

// ExtraCode ships code from outside the tt-metal tree: Paths, relative to Root.
type ExtraCode struct {
	Root  GitOrPath `yaml:"root"`
	Paths []string  `yaml:"paths"`
}

// GitOrPath is a local checkout path or a {repo, ref} to clone.
type GitOrPath struct {
	Path string
	Repo string `yaml:"repo"`
	Ref  string `yaml:"ref"`
	SHA  string `yaml:"sha"`
}

// UnmarshalYAML accepts a path string or a {repo, ref[, sha]} mapping.
func (g *GitOrPath) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		g.Path = n.Value
		return nil
	}
	type plain GitOrPath
	if err := n.Decode((*plain)(g)); err != nil {
		return err
	}
	if g.Repo == "" || g.Ref == "" {
		return fmt.Errorf("line %d: a git source needs both repo and ref", n.Line)
	}
	return nil
}

// Image says where the built image is published.
type Image struct {
	Registry   string `yaml:"registry"`
	Repository string `yaml:"repository"`
}

// Runtime is the tt-dit-server kind's runtime block (launchers.TtDitServerLauncher.RUNTIME_KEYS).
type Runtime struct {
	App          string   `yaml:"app"`
	Packages     []string `yaml:"packages"`
	Lock         string   `yaml:"lock"`
	MeshShapeEnv string   `yaml:"mesh_shape_env"`
}

// Serve is the `serve:` block and each `serve_profiles` entry (manifest.ServeSettings;
// Name and Description only on profiles).
type Serve struct {
	Name             string            `yaml:"name"`
	Description      string            `yaml:"description"`
	Hardware         string            `yaml:"hardware"`
	MeshDevice       string            `yaml:"mesh_device"`
	Port             int               `yaml:"port"`
	MaxModelLen      int               `yaml:"max_model_len"`
	MaxNumSeqs       int               `yaml:"max_num_seqs"`
	BlockSize        int               `yaml:"block_size"`
	ServerTimeout    int               `yaml:"server_timeout"`
	Capabilities     map[string]string `yaml:"capabilities"`
	AdditionalConfig map[string]any    `yaml:"additional_config"`
	Args             []any             `yaml:"args"`
	Env              map[string]string `yaml:"env"`
}

// Card is the author-written model-card prose.
type Card struct {
	Description string `yaml:"description"`
	Quickstart  string `yaml:"quickstart"`
}

// versionString is `schema:`; it must be a YAML string, because an unquoted 5.10 is the
// float 5.1 (the schema writes it as a string for that reason).
type versionString string

func (v *versionString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return fmt.Errorf("line %d: schema must be a quoted string such as \"5.1\", got %s", n.Line, n.Value)
	}
	*v = versionString(n.Value)
	return nil
}

// LoadManifest reads and strictly decodes a tt-model.yaml; it does not validate it.
func LoadManifest(file string) (*Manifest, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", file, err)
	}
	return &m, nil
}

// Schema facts from tt-model-manager.
const (
	// SchemaVersion is container_manifest.SCHEMA_VERSION (= manifest.CONTAINER_SCHEMA).
	SchemaVersion = "5.1"
	// KindTTDiTServer is the uvicorn-launched kind (launchers.TtDitServerLauncher.name).
	KindTTDiTServer = "tt-dit-server"
)

var (
	// container_manifest.ARCHES
	arches = []string{"blackhole", "wormhole_b0"}
	// launchers.KINDS
	kinds = []string{"tt-dit-server", "vllm-fork", "vllm-plugin"}
	// container_manifest.MESH_DEVICE_PRESETS: the plugin's closed table of mesh names.
	meshPresets = map[string][2]int{
		"N150": {1, 1}, "P100": {1, 1}, "P150": {1, 1}, "P150x2": {1, 2}, "N300": {1, 2},
		"P300": {1, 2}, "N150x4": {1, 4}, "P150x4": {1, 4}, "T3K": {1, 8}, "P150x8": {1, 8},
		"P300x2": {1, 4}, "QB2": {2, 2}, "TG": {4, 8}, "BH-Galaxy": {4, 8},
	}
	// container_manifest._BOARD_CHIPS: chips per board named by a `hardware` label.
	boardChips = map[string]int{"p100": 1, "p150": 1, "n150": 1, "e150": 1, "p300": 2, "n300": 2}

	hardwareRE = regexp.MustCompile(`^([a-z]\d+[a-z]?)(?:x(\d+))?$`)
	meshRE     = regexp.MustCompile(`^[(\[]\s*(\d+)\s*,\s*(\d+)\s*[)\]]$`)
	slugRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	appRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate applies the schema's load-time rules (validate_semantics, the pydantic shape
// and the tt-dit-server launcher's validate) and returns every violation found.
func (m *Manifest) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if m.Schema != SchemaVersion {
		bad("schema %q: this checker knows schema %q", m.Schema, SchemaVersion)
	}
	if !strings.Contains(m.Repo, "/") {
		bad("repo %q: must be a namespaced Hugging Face id (org/name)", m.Repo)
	}
	if !slugRE.MatchString(m.Name) {
		bad("name %q: must be a lowercase slug (it becomes a cache path and a container name)", m.Name)
	}
	if !strings.Contains(m.Weights.Repo, "/") {
		bad("weights %q: must be a namespaced Hugging Face id (org/name)", m.Weights.Repo)
	}
	seen := map[string]bool{m.Weights.Repo: true}
	for _, w := range m.AuxiliaryWeights {
		if !strings.Contains(w.Repo, "/") {
			bad("auxiliary_weights %q: must be a namespaced Hugging Face id", w.Repo)
		}
		if seen[w.Repo] {
			bad("weights repository %q is listed twice", w.Repo)
		}
		seen[w.Repo] = true
	}
	if !contains(arches, m.Arch) {
		bad("arch %q: must be one of %v", m.Arch, arches)
	}
	if !contains(kinds, m.Kind) {
		bad("kind %q: must be one of %v", m.Kind, kinds)
	}
	errs = append(errs, m.Source.validate()...)
	if m.Kind == KindTTDiTServer {
		errs = append(errs, m.validateTTDiTRuntime()...)
	}
	errs = append(errs, m.validateProfiles()...)
	return errors.Join(errs...)
}

func (s Source) validate() []error {
	var errs []error
	if s.TTMetal.Path == "" && s.TTMetal.Repo == "" {
		errs = append(errs, errors.New("source.tt_metal: required (a local tree or {repo, ref})"))
	}
	if len(s.Code) == 0 {
		errs = append(errs, errors.New("source.code: at least one path is required"))
	}
	for _, p := range s.Code {
		if err := relativePath(p); err != nil {
			errs = append(errs, fmt.Errorf("source.code %q: %w", p, err))
		}
	}
	for i, e := range s.ExtraCode {
		if e.Root.Path == "" && e.Root.Repo == "" {
			errs = append(errs, fmt.Errorf("source.extra_code[%d].root: required", i))
		}
		if len(e.Paths) == 0 {
			errs = append(errs, fmt.Errorf("source.extra_code[%d].paths: at least one path is required", i))
		}
		for _, p := range e.Paths {
			if err := relativePath(p); err != nil {
				errs = append(errs, fmt.Errorf("source.extra_code[%d] path %q: %w", i, p, err))
			}
		}
	}
	if s.Ubuntu == "" {
		errs = append(errs, errors.New("source.ubuntu: required (the base image, e.g. \"22.04\")"))
	}
	if s.Python == "" {
		errs = append(errs, errors.New("source.python: required (e.g. \"3.12\")"))
	}
	return errs
}

// AllCodePaths is every path the image ships, as it appears under code/ (Source.all_code_paths).
func (s Source) AllCodePaths() []string {
	all := append([]string(nil), s.Code...)
	for _, e := range s.ExtraCode {
		all = append(all, e.Paths...)
	}
	return all
}

func (m *Manifest) validateTTDiTRuntime() []error {
	var errs []error
	app := m.Runtime.App
	if !appRE.MatchString(app) {
		return append(errs, fmt.Errorf("runtime.app %q: must be \"module.path:attribute\"", app))
	}
	top := strings.SplitN(strings.SplitN(app, ":", 2)[0], ".", 2)[0]
	shipped := false
	for _, p := range m.Source.AllCodePaths() {
		if strings.SplitN(p, "/", 2)[0] == top {
			shipped = true
		}
	}
	if !shipped {
		errs = append(errs, fmt.Errorf("runtime.app %q lives under %q, which no source.code or source.extra_code path ships", app, top))
	}
	if env := m.Runtime.MeshShapeEnv; env != "" && !envNameRE.MatchString(env) {
		errs = append(errs, fmt.Errorf("runtime.mesh_shape_env %q: not a valid environment variable name", env))
	}
	return errs
}

// profiles returns the serve profiles with `serve:` merged under each; a manifest without
// serve_profiles has one, named "default" (container_manifest.effective_profiles).
func (m *Manifest) profiles() []Serve {
	if len(m.ServeProfiles) == 0 {
		p := m.Serve
		p.Name = "default"
		return []Serve{p}
	}
	merged := make([]Serve, 0, len(m.ServeProfiles))
	for _, p := range m.ServeProfiles {
		out := m.Serve
		out.Name, out.Description = p.Name, p.Description
		if p.Hardware != "" {
			out.Hardware = p.Hardware
		}
		if p.MeshDevice != "" {
			out.MeshDevice = p.MeshDevice
		}
		if p.Port != 0 {
			out.Port = p.Port
		}
		if len(p.Env) > 0 {
			env := make(map[string]string, len(out.Env)+len(p.Env))
			for k, v := range out.Env {
				env[k] = v
			}
			for k, v := range p.Env {
				env[k] = v
			}
			out.Env = env
		}
		merged = append(merged, out)
	}
	return merged
}

func (m *Manifest) validateProfiles() []error {
	var errs []error
	names := map[string]int{}
	for _, p := range m.profiles() {
		names[p.Name]++
	}
	for n, count := range names {
		if count > 1 {
			errs = append(errs, fmt.Errorf("serve profile %q is declared %d times", n, count))
		}
	}
	if len(names) > 1 && m.DefaultProfile == "" {
		errs = append(errs, errors.New("several serve profiles need a default_profile"))
	}
	if m.DefaultProfile != "" && names[m.DefaultProfile] == 0 {
		errs = append(errs, fmt.Errorf("default_profile %q names no profile", m.DefaultProfile))
	}
	for _, p := range m.profiles() {
		where := fmt.Sprintf("serve profile %q", p.Name)
		if p.Hardware == "" || p.MeshDevice == "" {
			errs = append(errs, fmt.Errorf("%s: hardware and mesh_device are required", where))
			continue
		}
		mesh, err := ParseMeshDevice(p.MeshDevice)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		chips, ok := HardwareChips(p.Hardware)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: hardware %q is not a board label <board>[xN] (boards: p100 p150 n150 e150 p300 n300)", where, p.Hardware))
			continue
		}
		if mesh[0]*mesh[1] != chips {
			errs = append(errs, fmt.Errorf("%s: mesh_device %q opens %dx%d chips but hardware %q has %d", where, p.MeshDevice, mesh[0], mesh[1], p.Hardware, chips))
		}
	}
	return errs
}

// ParseMeshDevice resolves a mesh_device string (a preset name or "(rows, cols)") to its shape.
func ParseMeshDevice(s string) ([2]int, error) {
	if shape, ok := meshPresets[s]; ok {
		return shape, nil
	}
	if g := meshRE.FindStringSubmatch(strings.TrimSpace(s)); g != nil {
		r, _ := strconv.Atoi(g[1])
		c, _ := strconv.Atoi(g[2])
		return [2]int{r, c}, nil
	}
	return [2]int{}, fmt.Errorf("mesh_device %q: not a preset of the plugin's table nor \"(rows, cols)\"", s)
}

// HardwareChips is the chip count a hardware label names (p150a -> 1, p300x2 -> 4).
func HardwareChips(label string) (int, bool) {
	g := hardwareRE.FindStringSubmatch(strings.ToLower(strings.TrimSpace(label)))
	if g == nil {
		return 0, false
	}
	base := g[1]
	per, ok := boardChips[base]
	if last := base[len(base)-1]; !ok && last >= 'a' && last <= 'z' {
		// a trailing board-revision letter (p150a) does not change the count
		per, ok = boardChips[base[:len(base)-1]]
	}
	if !ok {
		return 0, false
	}
	mult := 1
	if g[2] != "" {
		mult, _ = strconv.Atoi(g[2])
	}
	if mult < 1 {
		return 0, false
	}
	return per * mult, true
}

func relativePath(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if path.IsAbs(p) {
		return errors.New("must be relative to its root")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return errors.New("must not leave its root")
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
