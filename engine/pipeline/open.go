package pipeline

import (
	"cmp"
	"fmt"
	"path/filepath"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/engine/native"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/engine/tokenizer"
)

// OpenOptions are what Open needs: the engine's settings, as the worker reads them from
// LA_* variables, and the checkpoint and backend they run on.
type OpenOptions struct {
	engine.Settings
	WeightsDir      string // a checkpoint directory (already resolved)
	ModelName       string // for /info and results: what the checkpoint is ("LocateAnything-3B", "tiny-shapes")
	WeightsRepo     string // for /info: where the weights came from
	WeightsRevision string
	MaxPixels       int64 // decode budget for one image

	// Precision and DecodeMode describe the run for /info and /predict when the backend's
	// own settings decide them (the ttnn adapter's LA_PREC and LA_TRACE); empty means the
	// CPU backend's: the checkpoint's weight type with f32 compute, and trace decode.
	Precision  string
	DecodeMode string

	// Sim is the simulated chip's cost model (LA_SIM_*) and SimMeter, when set, the meter
	// its device time is added to; both are used only with Backend "sim".
	Sim      sim.Costs
	SimMeter *sim.Meter

	// BackendOptions are passed to the backend as its option lines (the ttnn backend's
	// adapter, path, python_lib and llm_dir, say). For ttnn Open adds canon_grid: the grid
	// the host side resizes images for, "HxW" or "native", so the adapter, which builds its
	// vision graph for one grid, can never disagree with it.
	BackendOptions map[string]string
}

// Open loads a checkpoint into a native backend and builds the Pipeline around it. Native
// backends bind to the calling OS thread: call Open on the thread that will call Generate
// and Close (engine/chip does). The simulated chip (Backend "sim") reads only the
// checkpoint's configuration and tokenizer, not its weights.
func Open(o OpenOptions) (*Pipeline, error) {
	if o.Backend == engine.BackendSim {
		cfg, err := checkpoint.LoadConfig(o.WeightsDir)
		if err != nil {
			return nil, fmt.Errorf("opening the checkpoint: %w", err)
		}
		return build(&checkpoint.Model{Dir: o.WeightsDir, Config: cfg}, o)
	}
	model, err := checkpoint.Open(o.WeightsDir)
	if err != nil {
		return nil, fmt.Errorf("opening the checkpoint: %w", err)
	}
	p, err := build(model, o)
	if err != nil {
		model.Close()
		return nil, err
	}
	return p, nil
}

func build(model *checkpoint.Model, o OpenOptions) (*Pipeline, error) {
	cfg := model.Config
	tok, err := tokenizer.Load(o.WeightsDir)
	if err != nil {
		return nil, fmt.Errorf("loading the tokenizer: %w", err)
	}
	if id, ok := tok.ID("<IMG_CONTEXT>"); !ok || int(id) != cfg.ImageTokenID {
		return nil, fmt.Errorf("tokenizer's <IMG_CONTEXT> is %d (found %v) but config.json says image_token_index %d",
			id, ok, cfg.ImageTokenID)
	}

	pre := imageproc.Options{
		InTokenLimit: cfg.Preprocessor.InTokenLimit,
		PatchSize:    cfg.Preprocessor.PatchSize,
		MergeKernel:  cfg.Preprocessor.MergeKernel,
		Mean:         cfg.Preprocessor.ImageMean,
		Std:          cfg.Preprocessor.ImageStd,
		MaxPixels:    o.MaxPixels,
	}
	pre.InTokenLimit = o.InTokens(pre.InTokenLimit)
	if pre.CanonGrid, err = imageproc.ResolveCanonGrid(o.CanonGridSetting(), o.CanonAspect, pre); err != nil {
		return nil, fmt.Errorf("canonical grid: %w", err)
	}

	threads := o.ThreadCount()
	backendOptions := map[string]string{}
	for k, v := range o.BackendOptions {
		backendOptions[k] = v
	}
	if o.Backend == engine.BackendTTNN { // the chip builds its vision graph for one grid
		backendOptions["canon_grid"] = formatGrid(pre.CanonGrid)
	}
	var backend interface {
		engine.Backend
		MaxSeqLen() int
	}
	if o.Backend == engine.BackendSim {
		backend, err = sim.New(sim.Options{
			Costs: o.Sim, MaxBatch: o.MaxBatch, MaxSeqLen: o.MaxSeqLen, Tokenizer: tok,
			EOS: int32(cfg.Text.EOSTokenID), ImageToken: int32(cfg.ImageTokenID),
			PatchSize: cfg.Preprocessor.PatchSize, MergeKernel: cfg.Preprocessor.MergeKernel, Meter: o.SimMeter,
		})
	} else {
		backend, err = native.Open(o.Backend, model, native.Options{
			MaxSeqLen: o.MaxSeqLen, MaxBatch: o.MaxBatch, Threads: threads, BackendOptions: backendOptions,
			WeightsQuant: o.WeightsQuant,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("opening the %s backend: %w", o.Backend, err)
	}
	hybrid, noHybrid := hybridTokens(cfg)
	p, err := New(backend, tok, Config{
		GenerationMode:  o.GenerationMode,
		Hybrid:          hybrid,
		NoHybrid:        noHybrid,
		Preprocess:      pre,
		MaxSeqLen:       backend.MaxSeqLen(),
		MaxNewTokens:    o.MaxNewTokens,
		MaxNewTokensCap: o.MaxNewTokensCap,
		EOS:             int32(cfg.Text.EOSTokenID),
		Info: engine.Info{
			Model:           cmp.Or(o.ModelName, filepath.Base(o.WeightsDir)),
			Device:          device(o.Backend, threads),
			DecodeMode:      cmp.Or(o.DecodeMode, "ar_greedy_trace"),
			Precision:       cmp.Or(o.Precision, precision(o.Backend, o.WeightsQuant, matmul(backend), split(backend), model)),
			WeightsDir:      o.WeightsDir,
			WeightsRepo:     o.WeightsRepo,
			WeightsRevision: o.WeightsRevision,
			Simulated:       o.Backend == sim.Name,
		},
	}, model.Close)
	if err != nil {
		backend.Close()
		return nil, err
	}
	return p, nil
}

// hybridTokens are the ids parallel box decoding reads from the checkpoint, or why it
// cannot run.
func hybridTokens(cfg *checkpoint.Config) (*blockdecode.Tokens, error) {
	if err := cfg.HybridError(); err != nil {
		return nil, err
	}
	t := &blockdecode.Tokens{
		BoxStart: int32(cfg.BoxStartTokenID), BoxEnd: int32(cfg.BoxEndTokenID),
		RefStart: int32(cfg.RefStartTokenID), RefEnd: int32(cfg.RefEndTokenID),
		CoordStart: int32(cfg.CoordStartTokenID), CoordEnd: int32(cfg.CoordEndTokenID),
		None: int32(cfg.NoneTokenID), Null: int32(cfg.NullTokenID), IMEnd: int32(cfg.Text.EOSTokenID),
		TextMask: int32(cfg.TextMaskTokenID),
	}
	if err := t.Validate(cfg.Text.Vocab); err != nil {
		return nil, fmt.Errorf("%s: %w", checkpoint.ConfigFile, err)
	}
	return t, nil
}

// formatGrid writes a canonical grid as LA_CANON_GRID reads it.
func formatGrid(g [2]int) string {
	if g == [2]int{} {
		return "native"
	}
	return fmt.Sprintf("%dx%d", g[0], g[1])
}

// matmul is how a native CPU backend multiplies in prefill and vision ("" elsewhere).
func matmul(b any) native.Matmul {
	if m, ok := b.(interface{ Matmul() native.Matmul }); ok {
		return m.Matmul()
	}
	return ""
}

// split is which of a native CPU backend's bf16 products carry split activations ("" elsewhere).
func split(b any) native.Split {
	if s, ok := b.(interface{ Split() native.Split }); ok {
		return s.Split()
	}
	return ""
}

// device describes where a backend runs, for /health and /info.
func device(backend engine.BackendKind, threads int) string {
	switch backend {
	case engine.BackendTTNN:
		return "Blackhole p150a mesh 1x1"
	case engine.BackendSim:
		return "simulated Blackhole p150a"
	}
	return fmt.Sprintf("CPU, %d threads", threads)
}

// bf16Products says where the CPU backend's bf16 products run ("on AMX", "on AVX512-BF16"),
// or "" for float32 products.
func bf16Products(m native.Matmul) string {
	switch m {
	case native.MatmulAMX:
		return "on AMX"
	case native.MatmulAVX512BF16:
		return "on AVX512-BF16"
	}
	return ""
}

// precision names the checkpoint's weight type; the CPU backend computes in f32. The
// simulated chip computes nothing.
func precision(backend engine.BackendKind, quant engine.WeightsQuant, matmul native.Matmul, split native.Split, m *checkpoint.Model) string {
	if backend == engine.BackendSim {
		return "none (simulated)"
	}
	if on := bf16Products(matmul); on != "" {
		weights := "checkpoint weights"
		if quant == engine.WeightsQ8 {
			weights = "int8 decoder weights (q8, blocks of 32)"
		}
		splits := ""
		switch split {
		case native.SplitVision:
			splits = ", vision's activations as two bf16 each"
		case native.SplitAll:
			splits = ", their activations as two bf16 each"
		}
		return weights + "; prefill and vision in bf16 " + on + " with f32 sums" + splits + ", decode f32 compute"
	}
	if quant == engine.WeightsQ8 {
		return "int8 decoder weights (q8, blocks of 32), f32 compute"
	}
	if t, ok := m.Tensor("language_model.model.embed_tokens.weight"); ok {
		switch t.DType {
		case checkpoint.BF16:
			return "bf16 weights, f32 compute"
		case checkpoint.F16:
			return "f16 weights, f32 compute"
		}
	}
	return "f32"
}
