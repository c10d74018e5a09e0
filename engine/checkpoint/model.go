package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Model is an opened checkpoint: its configuration and every tensor of its safetensors
// files, memory-mapped. A Model is read-only and safe for concurrent use until Close.
type Model struct {
	Dir     string
	Config  *Config
	Tensors []Tensor // sorted by name

	files []*mappedFile
	extra []string
}

// Open reads the configuration in dir, maps model.safetensors (or, when
// model.safetensors.index.json exists, every shard its weight_map names) and checks that
// every tensor the configuration implies is present with the right shape. Tensors the
// configuration does not use are kept but reported by Extra.
func Open(dir string) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	files, err := weightFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}

	m := &Model{Dir: dir, Config: cfg}
	for _, name := range files {
		mf, err := openSafetensors(filepath.Join(dir, name))
		if err != nil {
			_ = m.Close()
			return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		m.files = append(m.files, mf)
	}
	if err := m.collect(); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := m.checkIndex(); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := m.checkExpected(); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return m, nil
}

// weightFiles names the safetensors files of dir: the shards of the index when there is
// one, else the single file.
func weightFiles(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, SingleFile)); err != nil {
			return nil, fmt.Errorf("no %s and no %s: %w", IndexFile, SingleFile, err)
		}
		return []string{SingleFile}, nil
	}
	if err != nil {
		return nil, err
	}
	weightMap, err := parseIndex(data)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range weightMap {
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	return files, nil
}

// parseIndex reads the weight_map of model.safetensors.index.json and refuses shard
// names that would leave the checkpoint directory.
func parseIndex(data []byte) (map[string]string, error) {
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("%s: %w", IndexFile, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is missing or empty", IndexFile)
	}
	for tensor, f := range index.WeightMap {
		if f == "" || f != filepath.Base(f) || strings.HasPrefix(f, ".") {
			return nil, fmt.Errorf("%s: weight_map[%q] = %q is not a file name in the checkpoint directory", IndexFile, tensor, f)
		}
	}
	return index.WeightMap, nil
}

// collect gathers the tensors of all files, sorted by name, refusing a name that two
// files both hold.
func (m *Model) collect() error {
	where := map[string]string{}
	for _, f := range m.files {
		for _, t := range f.tensors {
			if other, dup := where[t.Name]; dup {
				return fmt.Errorf("tensor %q is in both %s and %s", t.Name, filepath.Base(other), filepath.Base(f.path))
			}
			where[t.Name] = f.path
			m.Tensors = append(m.Tensors, t)
		}
	}
	sort.Slice(m.Tensors, func(i, j int) bool { return m.Tensors[i].Name < m.Tensors[j].Name })
	return nil
}

// checkIndex makes sure every tensor the index promises is in the shard it names.
func (m *Model) checkIndex() error {
	data, err := os.ReadFile(filepath.Join(m.Dir, IndexFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	weightMap, err := parseIndex(data)
	if err != nil {
		return err
	}
	inFile := map[string]string{}
	for _, f := range m.files {
		for _, t := range f.tensors {
			inFile[t.Name] = filepath.Base(f.path)
		}
	}
	names := make([]string, 0, len(weightMap))
	for name := range weightMap {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		got, ok := inFile[name]
		if !ok {
			return fmt.Errorf("%s lists tensor %q in %s, but no shard holds it", IndexFile, name, weightMap[name])
		}
		if got != weightMap[name] {
			return fmt.Errorf("%s lists tensor %q in %s, but it is in %s", IndexFile, name, weightMap[name], got)
		}
	}
	return nil
}

// checkExpected compares the tensors against the configuration and records the extras.
func (m *Model) checkExpected() error {
	var errs []error
	expected := map[string]bool{}
	checkShape := func(name string, want []int64) {
		t, ok := m.Tensor(name)
		if !ok {
			errs = append(errs, fmt.Errorf("tensor %q is missing (want shape %v)", name, want))
			return
		}
		if !slices.Equal(t.Shape, want) {
			errs = append(errs, fmt.Errorf("tensor %q has shape %v, but the config implies %v", name, t.Shape, want))
		}
	}
	for _, spec := range m.Config.ExpectedTensors() {
		expected[spec.Name] = true
		checkShape(spec.Name, spec.Shape)
	}
	expected[LMHeadName] = true
	if m.HasLMHead() {
		checkShape(LMHeadName, m.Config.LMHeadShape())
	}
	for _, t := range m.Tensors {
		if !expected[t.Name] {
			m.extra = append(m.extra, t.Name)
		}
	}
	// A long list of errors means a mismatched config; the first few say enough.
	const maxReported = 8
	if len(errs) > maxReported {
		n := len(errs)
		errs = append(errs[:maxReported], fmt.Errorf("... and %d more tensor errors", n-maxReported))
	}
	return errors.Join(errs...)
}

// Tensor finds a tensor by name.
func (m *Model) Tensor(name string) (*Tensor, bool) {
	i := sort.Search(len(m.Tensors), func(i int) bool { return m.Tensors[i].Name >= name })
	if i < len(m.Tensors) && m.Tensors[i].Name == name {
		return &m.Tensors[i], true
	}
	return nil, false
}

// HasLMHead reports whether the checkpoint carries language_model.lm_head.weight. Without
// it the output projection is the token embedding matrix (tied embeddings).
func (m *Model) HasLMHead() bool {
	_, ok := m.Tensor(LMHeadName)
	return ok
}

// Extra lists, sorted, the tensors in the files that the forward pass does not read.
// They are harmless; a caller may log them at debug level.
func (m *Model) Extra() []string {
	return slices.Clone(m.extra)
}

// Bytes is the total size of all tensor data.
func (m *Model) Bytes() int64 {
	var n int64
	for i := range m.Tensors {
		n += int64(len(m.Tensors[i].Data))
	}
	return n
}

// Close unmaps the files. Every Tensor.Data is invalid afterwards. Close is idempotent.
func (m *Model) Close() error {
	var errs []error
	for _, f := range m.files {
		errs = append(errs, f.unmap())
	}
	m.files, m.Tensors, m.extra = nil, nil, nil
	return errors.Join(errs...)
}
