// Package extract is the ttnn backend's first-boot step: it turns a LocateAnything
// snapshot into the plain Qwen2 checkpoint directory that tt-metal's tt_transformers
// loads (ModelArgs reads HF_MODEL), as the validated Blackhole deployment does.
//
// From the snapshot it writes <cache>/la-qwen2_5-3b/ with
//
//   - model.safetensors: every language_model.model.X tensor as model.X and
//     language_model.lm_head.weight as lm_head.weight, bytes and dtype unchanged,
//     streamed from the memory-mapped snapshot;
//   - config.json: a Qwen2ForCausalLM config synthesized from config.json's text_config;
//   - the tokenizer files (vocab.json, merges.txt and the optional ones), with auto_map
//     removed from tokenizer_config.json so the directory loads as a plain Qwen2 model
//     without trust_remote_code; generation_config.json when the snapshot has one.
//
// Every file is written to a temporary name and renamed into place, model.safetensors
// last: a directory holding model.safetensors and config.json is complete, and is reused
// on the next boot unless Options.Force (LA_FORCE_EXTRACT=1) asks for a fresh copy. Two
// processes sharing the cache take turns through a lock file beside the directory.
package extract

import (
	"github.com/locateanything/detect/internal/flock"

	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/locateanything/detect/engine/checkpoint"
)

// DirName is the extracted LLM's directory under TT_DIT_CACHE_DIR, as on the upstream server. Keep
// "it" and "instruct" out of a custom path: tt_transformers' ModelArgs guesses the model
// flavour from it.
const DirName = "la-qwen2_5-3b"

// The prefixes the LocateAnything checkpoint puts in front of the Qwen2 tensor names.
const (
	llmPrefix  = "language_model.model."
	headName   = checkpoint.LMHeadName // language_model.lm_head.weight
	qwenPrefix = "model."
	qwenHead   = "lm_head.weight"
	weightFile = "model.safetensors"
	configFile = "config.json"
)

// requiredTokenizerFiles must be in the snapshot; optionalFiles are copied when present.
var (
	requiredTokenizerFiles = []string{"vocab.json", "merges.txt"}
	optionalFiles          = []string{"added_tokens.json", "special_tokens_map.json",
		"tokenizer.json", "chat_template.json", "generation_config.json"}
)

// Options say where the extracted directory goes: the extraction's settings, each field's
// `envconfig` tag its variable, `default` its default and `desc` its meaning (package
// config embeds the type in the worker's configuration), and the logger.
type Options struct {
	// CacheDir is the parent of DirName. Ignored when Dir is set.
	CacheDir string `envconfig:"TT_DIT_CACHE_DIR" desc:"parent of the extracted LLM (ttnn)"`
	// Dir is the extracted directory itself; empty means CacheDir/DirName.
	Dir string `envconfig:"LA_LLM_DIR" desc:"the extracted LLM itself (ttnn); empty = below TT_DIT_CACHE_DIR"`
	// Force re-extracts even when the directory is complete.
	Force bool `envconfig:"LA_FORCE_EXTRACT" default:"false" desc:"extract the LLM again at start-up (ttnn)"`
	// Logger receives the progress lines; nil discards them.
	Logger *slog.Logger `ignored:"true"`
}

// Check reports options that name no directory to extract into.
func (o Options) Check() error {
	if o.CacheDir == "" && o.Dir == "" {
		return errors.New("neither TT_DIT_CACHE_DIR nor LA_LLM_DIR is set: the extracted LLM needs a writable directory")
	}
	return nil
}

// Target is the directory the extraction writes.
func (o Options) Target() string {
	if o.Dir != "" {
		return o.Dir
	}
	return filepath.Join(o.CacheDir, DirName)
}

// Result says what LLM did.
type Result struct {
	Dir       string // the extracted directory: set HF_MODEL (or the ttnn llm_dir option) to it
	Extracted bool   // false when a complete directory was reused
	Tensors   int    // tensors written
	Bytes     int64  // tensor bytes written
}

// Complete reports whether dir holds a finished extraction.
func Complete(dir string) bool {
	for _, f := range []string{weightFile, configFile} {
		if info, err := os.Stat(filepath.Join(dir, f)); err != nil || !info.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// LLM extracts the Qwen2 LLM of the snapshot in snapshotDir (unless a complete extraction
// is there and o.Force is false) and returns the directory.
func LLM(ctx context.Context, snapshotDir string, o Options) (Result, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := o.Check(); err != nil {
		return Result{}, fmt.Errorf("extract: %w", err)
	}
	dir := o.Target()
	if !o.Force && Complete(dir) {
		log.Info("Loading weights: extracted LLM present", "dir", dir)
		return Result{Dir: dir}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("extract: %w", err)
	}
	unlock, err := flock.Lock(ctx, dir+".lock", lockPoll)
	if err != nil {
		return Result{}, fmt.Errorf("extract: waiting for another extraction: %w", err)
	}
	defer unlock()
	if !o.Force && Complete(dir) { // another process finished while we waited
		return Result{Dir: dir}, nil
	}

	start := time.Now()
	log.Info("Loading weights: extracting the Qwen2.5 LLM", "snapshot", snapshotDir, "dir", dir)
	res, err := extract(ctx, snapshotDir, dir)
	if err != nil {
		return Result{}, fmt.Errorf("extract %s -> %s: %w", snapshotDir, dir, err)
	}
	log.Info("Loading weights: extracted", "dir", dir, "tensors", res.Tensors, "bytes", res.Bytes,
		"seconds", time.Since(start).Seconds())
	return res, nil
}

func extract(ctx context.Context, snapshotDir, dir string) (Result, error) {
	raw, err := os.ReadFile(filepath.Join(snapshotDir, configFile))
	if err != nil {
		return Result{}, err
	}
	m, err := checkpoint.Open(snapshotDir)
	if err != nil {
		return Result{}, err
	}
	defer m.Close()

	tensors := llmTensors(m)
	cfg, err := qwen2Config(raw, m.HasLMHead(), tensors[0].DType)
	if err != nil {
		return Result{}, err
	}
	if err := writeAtomic(dir, configFile, func(w io.Writer) error { _, err := w.Write(cfg); return err }); err != nil {
		return Result{}, err
	}
	if err := copyTokenizer(snapshotDir, dir); err != nil {
		return Result{}, err
	}
	var n int64
	err = writeAtomic(dir, weightFile, func(w io.Writer) error {
		n, err = writeSafetensors(ctx, w, tensors)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Dir: dir, Extracted: true, Tensors: len(tensors), Bytes: n}, nil
}

// renamed is one tensor under its Qwen2 name.
type renamed struct {
	Name string
	*checkpoint.Tensor
}

// llmTensors picks the decoder's tensors and the head, renamed, sorted by new name.
// checkpoint.Open has checked that all the decoder's tensors are there.
func llmTensors(m *checkpoint.Model) []renamed {
	var out []renamed
	for i := range m.Tensors {
		t := &m.Tensors[i]
		switch {
		case strings.HasPrefix(t.Name, llmPrefix):
			out = append(out, renamed{qwenPrefix + strings.TrimPrefix(t.Name, llmPrefix), t})
		case t.Name == headName:
			out = append(out, renamed{qwenHead, t})
		}
	}
	slices.SortFunc(out, func(a, b renamed) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// qwen2Config synthesizes the Qwen2ForCausalLM config.json from the snapshot's
// text_config: every field kept, the architecture and model type set, and
// tie_word_embeddings false when the snapshot carries its own lm_head (LocateAnything's
// does although its config says tied; the head is what every backend here uses).
func qwen2Config(raw []byte, hasHead bool, dtype checkpoint.DType) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	var text map[string]any
	if tc, ok := top["text_config"]; !ok {
		return nil, errors.New("config.json has no text_config")
	} else if err := unmarshalNumbers(tc, &text); err != nil {
		return nil, fmt.Errorf("config.json: text_config: %w", err)
	}
	for _, k := range []string{"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"} {
		if _, ok := text[k]; !ok {
			return nil, fmt.Errorf("config.json: text_config lacks %s", k)
		}
	}
	text["architectures"] = []string{"Qwen2ForCausalLM"}
	text["model_type"] = "qwen2"
	if hasHead {
		text["tie_word_embeddings"] = false
	}
	if _, ok := text["torch_dtype"]; !ok {
		text["torch_dtype"] = map[checkpoint.DType]string{checkpoint.BF16: "bfloat16", checkpoint.F16: "float16", checkpoint.F32: "float32"}[dtype]
	}
	out, err := json.MarshalIndent(text, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func unmarshalNumbers(raw []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber() // keep 1e-06 and 1000000.0 as written
	return d.Decode(v)
}

// copyTokenizer copies the tokenizer and generation files, dropping auto_map from
// tokenizer_config.json.
func copyTokenizer(src, dst string) error {
	copyFile := func(name string, required bool) error {
		data, err := os.ReadFile(filepath.Join(src, name))
		if errors.Is(err, os.ErrNotExist) && !required {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
		return writeAtomic(dst, name, func(w io.Writer) error { _, err := w.Write(data); return err })
	}
	for _, f := range requiredTokenizerFiles {
		if err := copyFile(f, true); err != nil {
			return err
		}
	}
	for _, f := range optionalFiles {
		if err := copyFile(f, false); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	var cfg map[string]any
	if err := unmarshalNumbers(data, &cfg); err != nil {
		return fmt.Errorf("tokenizer_config.json: %w", err)
	}
	delete(cfg, "auto_map")
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(dst, "tokenizer_config.json", func(w io.Writer) error { _, err := w.Write(append(out, '\n')); return err })
}

// writeSafetensors writes the safetensors format: an 8-byte little-endian header length,
// the JSON header (padded with spaces to 8-byte alignment), then each tensor's bytes in
// header order. It checks ctx between tensors.
func writeSafetensors(ctx context.Context, w io.Writer, ts []renamed) (int64, error) {
	type entry struct {
		DType   string   `json:"dtype"`
		Shape   []int64  `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range ts {
		n := int64(len(t.Data))
		header[t.Name] = entry{DType: t.DType.String(), Shape: t.Shape, Offsets: [2]int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return 0, err
	}
	for (8+len(h))%8 != 0 {
		h = append(h, ' ')
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(h))); err != nil {
		return 0, err
	}
	if _, err := w.Write(h); err != nil {
		return 0, err
	}
	for _, t := range ts {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if _, err := w.Write(t.Data); err != nil {
			return 0, fmt.Errorf("writing %s: %w", t.Name, err)
		}
	}
	return off, nil
}

// writeAtomic writes dir/name through a temporary file in dir, synced and renamed into
// place, so a reader never sees a partial file.
func writeAtomic(dir, name string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = write(bw); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err = os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}

// lockPoll is how often a process waiting for another's extraction tries the lock again.
const lockPoll = 250 * time.Millisecond
