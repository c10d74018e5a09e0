// Package native binds the C backends behind engine/native/la_backend.h to Go. Two are
// compiled in, both implementing the same ops table:
//
//   - "cpu" (cpu_*.c): the model in C on the host, reading the checkpoint's mapped tensors
//     (docs/cpu-backend.md);
//   - "ttnn" (ttnn_*.c): a bridge that loads libpython at run time and drives a Python
//     adapter module step by step (engine/ttnn: TT-NN on a Blackhole chip, or the numpy
//     stand-in the tests use; docs/ttnn-backend.md).
//
// Open loads a checkpoint into one of them and returns a *Backend, an engine.Backend.
//
// Threading: every method of a Backend must be called from one goroutine locked to one OS
// thread (runtime.LockOSThread), one call at a time. engine/chip guarantees this in the
// service; tests lock their goroutine themselves. The cpu backend keeps its own worker
// threads (sized by Options.Threads) and OpenBLAS keeps its own (OPENBLAS_NUM_THREADS); the
// ttnn bridge takes Python's GIL for each call and gives it back before returning.
package native

/*
#cgo CFLAGS: -O3 -march=x86-64-v2 -std=c11 -D_GNU_SOURCE -Wall
#cgo LDFLAGS: -lopenblas -lm -lpthread
#include <stdlib.h>
#include "la_backend.h"

// cgo can not call through C function pointers; these trampolines do.
static la_engine *la_open(const la_backend_ops *o, const la_config *c, char *err, size_t n) {
	return o->open(c, err, n);
}
static int la_vision(const la_backend_ops *o, la_engine *e, const float *p, int gh, int gw, char *err, size_t n) {
	return o->vision(e, p, gh, gw, err, n);
}
static int la_step(const la_backend_ops *o, la_engine *e, int n, const la_step_slot *slots, const int32_t *toks, int k, int nw, const int32_t *watch, int32_t *top_ids, float *top_p, float *watch_p, char *err, size_t en) {
	return o->step(e, n, slots, toks, k, nw, watch, top_ids, top_p, watch_p, err, en);
}
static int la_release(const la_backend_ops *o, la_engine *e, int slot, char *err, size_t n) {
	return o->release(e, slot, err, n);
}
static int la_reset(const la_backend_ops *o, la_engine *e, char *err, size_t n) {
	return o->reset(e, err, n);
}
static const float *la_logits(const la_backend_ops *o, la_engine *e, int row, int *n) {
	return o->logits ? o->logits(e, row, n) : NULL;
}
static const float *la_image_embeddings(const la_backend_ops *o, la_engine *e, int *nt, int *dim) {
	return o->image_embeddings ? o->image_embeddings(e, nt, dim) : NULL;
}
static void la_close(const la_backend_ops *o, la_engine *e) {
	o->close(e);
}
*/
import "C"

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
)

// Options are the run-time choices of a native backend.
type Options struct {
	// MaxSeqLen is the longest prompt plus generated tokens (the KV-cache length of each
	// slot); the worker's LA_MAX_SEQ_LEN. Images are limited to MaxSeqLen image tokens.
	MaxSeqLen int
	// MaxBatch is the number of sequence slots decoded together (LA_MAX_BATCH), at least 1.
	MaxBatch int
	// Threads is the number of threads of the backend's own pool (decode matrix-vector
	// products, softmax, weight widening); 0 means one per online CPU.
	Threads int
	// WeightsQuant is the CPU backend's decoder and LM head weight format
	// (LA_WEIGHTS_QUANT): "" or bf16 for the checkpoint's own weights (the exact path), q8
	// for int8 blocks of 32 made at open (docs/cpu-backend.md). The cpu backend only.
	WeightsQuant engine.WeightsQuant
	// BackendOptions are backend-specific settings, passed to the backend as la_config's
	// "key=value" option lines (ttnn: python_lib, adapter, path, llm_dir). Keys must not
	// contain '=' or a newline, values no newline.
	BackendOptions map[string]string
}

// Backend is one checkpoint loaded into a native backend. It implements engine.Backend.
// The checkpoint.Model must stay open until Close returns: the C side reads its mapped
// tensors directly.
type Backend struct {
	ops    *C.la_backend_ops
	eng    *C.la_engine
	name   string
	errBuf *C.char

	patchElems int // 3 * patch * patch floats per patch
	maxSeqLen  int
	maxBatch   int

	step       *stepBuffers
	stepTokens []int32 // Step's ids, slot after slot, reused

	matmul Matmul // the cpu backend's prefill and vision GEMMs
	split  Split  // which of them carry split activations, when they are bf16
}

// stepBuffers are Step's C-side arguments, sized for the largest call: MaxBatch slots of
// StepMaxRows output rows each.
type stepBuffers struct {
	slots         *C.la_step_slot
	watch, topIDs *C.int32_t
	topP, watchP  *C.float
}

func newStepBuffers(maxBatch int) *stepBuffers {
	rows := C.size_t(maxBatch * engine.StepMaxRows)
	return &stepBuffers{
		slots:  (*C.la_step_slot)(C.calloc(C.size_t(maxBatch), C.size_t(unsafe.Sizeof(C.la_step_slot{})))),
		watch:  (*C.int32_t)(C.calloc(engine.StepMaxWatch, 4)),
		topIDs: (*C.int32_t)(C.calloc(rows*engine.StepMaxK, 4)),
		topP:   (*C.float)(C.calloc(rows*engine.StepMaxK, 4)),
		watchP: (*C.float)(C.calloc(rows*engine.StepMaxWatch, 4)),
	}
}

func (sb *stepBuffers) ok() bool {
	return sb.slots != nil && sb.watch != nil && sb.topIDs != nil && sb.topP != nil && sb.watchP != nil
}

func (sb *stepBuffers) free() {
	for _, p := range []unsafe.Pointer{unsafe.Pointer(sb.slots), unsafe.Pointer(sb.watch),
		unsafe.Pointer(sb.topIDs), unsafe.Pointer(sb.topP), unsafe.Pointer(sb.watchP)} {
		C.free(p)
	}
	*sb = stepBuffers{}
}

var _ engine.Backend = (*Backend)(nil)

// ErrClosed is returned by every call on a closed Backend.
var ErrClosed = errors.New("native backend is closed")

// Open loads the checkpoint m into the named backend, cpu or ttnn.
func Open(backend engine.BackendKind, m *checkpoint.Model, o Options) (*Backend, error) {
	if m == nil || m.Config == nil {
		return nil, errors.New("native: open: no checkpoint")
	}
	var ops *C.la_backend_ops
	switch backend {
	case engine.BackendCPU:
		ops = C.la_cpu_backend()
	case engine.BackendTTNN:
		ops = C.la_ttnn_backend()
	default:
		return nil, fmt.Errorf("native: open: unknown backend %q (this build has \"cpu\" and \"ttnn\")", backend)
	}
	if int(ops.abi_version) != C.LA_ABI_VERSION {
		return nil, fmt.Errorf("native: open %s: backend built for ABI %d, this binding speaks %d",
			backend, int(ops.abi_version), C.LA_ABI_VERSION)
	}
	if o.MaxSeqLen < 1 || o.MaxBatch < 1 || o.Threads < 0 {
		return nil, fmt.Errorf("native: open %s: MaxSeqLen %d and MaxBatch %d must be positive and Threads %d not negative",
			backend, o.MaxSeqLen, o.MaxBatch, o.Threads)
	}
	if o.Threads == 0 {
		o.Threads = runtime.NumCPU() // the CPUs this process may run on
	}

	switch {
	case o.WeightsQuant != "" && !engine.WeightsQuants.Has(o.WeightsQuant):
		return nil, fmt.Errorf("native: open %s: weights quantization %q, want one of %s", backend, o.WeightsQuant, engine.WeightsQuants.List())
	case o.WeightsQuant == engine.WeightsQ8 && backend != engine.BackendCPU:
		return nil, fmt.Errorf("native: open %s: q8 weights are a cpu backend option", backend)
	case o.WeightsQuant == engine.WeightsQ8:
		o.BackendOptions = maps.Clone(o.BackendOptions)
		if o.BackendOptions == nil {
			o.BackendOptions = map[string]string{}
		}
		o.BackendOptions["weights_quant"] = string(engine.WeightsQ8)
		// The fast path is fast throughout: unless the caller chose, prefill and vision
		// multiply in bf16 too, on AMX tiles or with AVX512_BF16, where the CPU has either
		// (docs/cpu-backend.md).
		if _, chosen := o.BackendOptions["matmul"]; !chosen {
			o.BackendOptions["matmul"] = string(MatmulAuto)
		}
	}
	if m := Matmul(o.BackendOptions["matmul"]); backend == engine.BackendCPU && m == MatmulAuto {
		fast := o.BackendOptions["weights_quant"] == string(engine.WeightsQ8)
		o.BackendOptions = maps.Clone(o.BackendOptions)
		o.BackendOptions["matmul"] = string(m.resolve(fast))
	}
	// bf16 products split the image's activations unless the caller chose (Splits names
	// the default first); the C side is told the value it runs with, which Split reports.
	bf16 := backend == engine.BackendCPU && cmp.Or(Matmul(o.BackendOptions["matmul"]), MatmulF32) != MatmulF32
	if _, chosen := o.BackendOptions["split_activations"]; bf16 && !chosen {
		o.BackendOptions = maps.Clone(o.BackendOptions)
		o.BackendOptions["split_activations"] = string(Splits[0])
	}
	for k, v := range o.BackendOptions {
		if k == "" || strings.ContainsAny(k, "=\n") || strings.Contains(v, "\n") {
			return nil, fmt.Errorf("native: open %s: backend option %q=%q: keys need no '=' or newline, values no newline", backend, k, v)
		}
	}

	cfg, free, err := makeConfig(m, o)
	if err != nil {
		return nil, fmt.Errorf("native: open %s: %w", backend, err)
	}
	defer free()

	b := &Backend{
		ops:        ops,
		name:       C.GoString(ops.name),
		errBuf:     (*C.char)(C.calloc(C.LA_ERR_LEN, 1)),
		patchElems: 3 * m.Config.Vision.PatchSize * m.Config.Vision.PatchSize,
		maxSeqLen:  o.MaxSeqLen,
		maxBatch:   o.MaxBatch,
		step:       newStepBuffers(o.MaxBatch),
		matmul:     cmp.Or(Matmul(o.BackendOptions["matmul"]), MatmulF32),
		split:      SplitNone, // float32 products have nothing to split
	}
	if bf16 {
		b.split = Split(o.BackendOptions["split_activations"])
	}
	if b.errBuf == nil || !b.step.ok() {
		b.freeBuffers()
		return nil, fmt.Errorf("native: open %s: out of memory", backend)
	}
	b.eng = C.la_open(ops, cfg, b.errBuf, C.LA_ERR_LEN)
	if b.eng == nil {
		msg := C.GoString(b.errBuf)
		b.freeBuffers()
		return nil, fmt.Errorf("native: open %s backend on %s: %s", backend, m.Dir, msg)
	}
	return b, nil
}

// freeBuffers frees the C-side buffers (C.free ignores NULL).
func (b *Backend) freeBuffers() {
	C.free(unsafe.Pointer(b.errBuf))
	b.errBuf = nil
	if b.step != nil {
		b.step.free()
	}
}

// makeConfig builds the la_config in C memory (cgo forbids passing Go memory that holds
// Go pointers): the tensor table and names are C allocations freed by the returned func
// after open; the tensor data pointers are the checkpoint's mmap'd bytes, which are not Go
// heap and stay valid until the Model is closed.
func makeConfig(m *checkpoint.Model, o Options) (*C.la_config, func(), error) {
	c := m.Config
	cfg := (*C.la_config)(C.calloc(1, C.size_t(unsafe.Sizeof(C.la_config{}))))
	n := len(m.Tensors)
	tablePtr := (*C.la_tensor)(C.calloc(C.size_t(n+1), C.size_t(unsafe.Sizeof(C.la_tensor{}))))
	if cfg == nil || tablePtr == nil {
		C.free(unsafe.Pointer(cfg))
		C.free(unsafe.Pointer(tablePtr))
		return nil, nil, errors.New("out of memory for the tensor table")
	}
	table := unsafe.Slice(tablePtr, n+1)
	free := func() {
		for i := 0; i < n; i++ {
			C.free(unsafe.Pointer(table[i].name))
		}
		C.free(unsafe.Pointer(cfg.weights_dir))
		C.free(unsafe.Pointer(cfg.options))
		C.free(unsafe.Pointer(tablePtr))
		C.free(unsafe.Pointer(cfg))
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if len(t.Shape) > C.LA_MAX_DIMS {
			free()
			return nil, nil, fmt.Errorf("tensor %s: %d dimensions, at most %d supported", t.Name, len(t.Shape), C.LA_MAX_DIMS)
		}
		ct := &table[i]
		ct.name = C.CString(t.Name)
		ct.dtype = C.la_dtype(t.DType)
		ct.ndim = C.int(len(t.Shape))
		for d, v := range t.Shape {
			ct.shape[d] = C.int64_t(v)
		}
		if len(t.Data) > 0 {
			ct.data = unsafe.Pointer(unsafe.SliceData(t.Data))
		}
		ct.nbytes = C.size_t(len(t.Data))
	}

	cfg.vision_hidden = C.int(c.Vision.Hidden)
	cfg.vision_layers = C.int(c.Vision.Layers)
	cfg.vision_heads = C.int(c.Vision.Heads)
	cfg.vision_intermediate = C.int(c.Vision.Intermediate)
	cfg.patch_size = C.int(c.Vision.PatchSize)
	cfg.merge_kernel = C.int(c.Vision.MergeKernel)
	cfg.pos_emb_height = C.int(c.Vision.PosEmbHeight)
	cfg.pos_emb_width = C.int(c.Vision.PosEmbWidth)
	cfg.vision_norm_eps = C.float(c.Vision.NormEps)
	cfg.hidden = C.int(c.Text.Hidden)
	cfg.layers = C.int(c.Text.Layers)
	cfg.heads = C.int(c.Text.Heads)
	cfg.kv_heads = C.int(c.Text.KVHeads)
	cfg.head_dim = C.int(c.Text.HeadDim)
	cfg.intermediate = C.int(c.Text.Intermediate)
	cfg.vocab = C.int(c.Text.Vocab)
	cfg.rope_theta = C.float(c.Text.RopeTheta)
	cfg.rms_norm_eps = C.float(c.Text.RMSNormEps)
	cfg.image_token_id = C.int(c.ImageTokenID)
	if c.Text.CausalAttn { // upstream's block mask is then causal inside the block
		cfg.block_causal = 1
	}
	cfg.max_seq_len = C.int(o.MaxSeqLen)
	cfg.max_batch = C.int(o.MaxBatch)
	cfg.threads = C.int(o.Threads)
	cfg.tensors = tablePtr
	cfg.n_tensors = C.int(n)
	cfg.weights_dir = C.CString(m.Dir)
	if len(o.BackendOptions) > 0 {
		keys := make([]string, 0, len(o.BackendOptions))
		for k := range o.BackendOptions {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var lines strings.Builder
		for _, k := range keys {
			lines.WriteString(k + "=" + o.BackendOptions[k] + "\n")
		}
		cfg.options = C.CString(lines.String())
	}
	return cfg, free, nil
}

// Name is the backend's short name ("cpu" or "ttnn").
func (b *Backend) Name() string { return b.name }

// Matmul names how the cpu backend multiplies in prefill and the vision tower, auto
// resolved: "f32" (float32), "amx" (bf16 on AMX tiles with float32 sums) or "avx512bf16"
// (the same with VDPBF16PS); "f32" for other backends.
func (b *Backend) Matmul() Matmul { return b.matmul }

// Split says which of the bf16 products carry split activations (option
// split_activations); SplitNone where the products are float32.
func (b *Backend) Split() Split { return b.split }

// MaxSeqLen is the KV-cache length of each slot.
func (b *Backend) MaxSeqLen() int { return b.maxSeqLen }

// MaxBatch is the number of sequence slots.
func (b *Backend) MaxBatch() int { return b.maxBatch }

// PrefillLength is the length a prompt of n tokens runs at: n on the CPU backend; on the
// ttnn backend tt_transformers pads the prompt to the next power of two, at least 128 (512
// for the 303-token demo prompt; docs/background.md, "Caveats the adapter inherits"), which
// /predict reports as prefill_tokens.
func (b *Backend) PrefillLength(n int) int {
	if b.name != string(engine.BackendTTNN) {
		return n
	}
	padded := 128
	for padded < n {
		padded *= 2
	}
	return padded
}

// failure turns the C error buffer into a Go error.
// The C side's messages mostly name their stage already ("prefill: slot 0 is live"); the
// stage is added only where they do not, so no message says it twice.
func (b *Backend) failure(op string) error {
	msg := C.GoString(b.errBuf)
	if !strings.HasPrefix(msg, op+": ") {
		msg = op + ": " + msg
	}
	return fmt.Errorf("native %s: %s", b.name, msg)
}

// Vision runs the vision tower on patches [gridH*gridW, 3, p, p] and keeps the image
// embeddings for the next Prefill.
func (b *Backend) Vision(patches []float32, gridH, gridW int) error {
	if b.eng == nil {
		return ErrClosed
	}
	if gridH <= 0 || gridW <= 0 || gridH > 1<<15 || gridW > 1<<15 {
		return fmt.Errorf("native %s: vision: grid %dx%d out of range", b.name, gridH, gridW)
	}
	if want := gridH * gridW * b.patchElems; len(patches) != want {
		return fmt.Errorf("native %s: vision: %d floats of patches, a %dx%d grid needs %d",
			b.name, len(patches), gridH, gridW, want)
	}
	if C.la_vision(b.ops, b.eng, (*C.float)(unsafe.SliceData(patches)), C.int(gridH), C.int(gridW),
		b.errBuf, C.LA_ERR_LEN) != 0 {
		return b.failure("vision")
	}
	return nil
}

// Step runs one step for len(slots) distinct slots (engine.Backend.Step): a prefill of a
// free slot, AR decode rows, parallel box decoding's pending rows and blocks.
func (b *Backend) Step(slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow) error {
	if b.eng == nil {
		return ErrClosed
	}
	n := len(slots)
	if n < 1 || n > b.maxBatch || k < 1 || k > engine.StepMaxK || len(watch) > engine.StepMaxWatch {
		return fmt.Errorf("native %s: step: %d slots (1..%d), k %d (1..%d), %d watched ids (at most %d)",
			b.name, n, b.maxBatch, k, engine.StepMaxK, len(watch), engine.StepMaxWatch)
	}
	if want := engine.StepRows(slots); len(rows) != want {
		return fmt.Errorf("native %s: step: %d output rows given, the slots make %d", b.name, len(rows), want)
	}
	for i, r := range rows {
		if len(r.TopIDs) != k || len(r.TopProbs) != k || len(r.Watch) != len(watch) {
			return fmt.Errorf("native %s: step: output row %d has %d ids, %d probabilities and %d watched; want %d, %d, %d",
				b.name, i, len(r.TopIDs), len(r.TopProbs), len(r.Watch), k, k, len(watch))
		}
	}
	for _, s := range slots {
		if err := b.checkStepSlot(s); err != nil {
			return err
		}
	}
	cs := unsafe.Slice(b.step.slots, n)
	b.stepTokens = b.stepTokens[:0]
	for i, s := range slots {
		noOutput := C.int32_t(0)
		if s.NoOutput {
			noOutput = 1
		}
		cs[i] = C.la_step_slot{slot: C.int32_t(s.Slot), n_pending: C.int32_t(len(s.Pending)), n_block: C.int32_t(len(s.Block)), no_output: noOutput}
		b.stepTokens = append(b.stepTokens, s.Pending...)
		b.stepTokens = append(b.stepTokens, s.Block...)
	}
	cw := unsafe.Slice(b.step.watch, engine.StepMaxWatch)
	for i, w := range watch {
		cw[i] = C.int32_t(w)
	}
	// The ids are Go memory the call only reads while it runs (a prompt may be thousands
	// of them), which cgo allows.
	if C.la_step(b.ops, b.eng, C.int(n), b.step.slots, (*C.int32_t)(unsafe.SliceData(b.stepTokens)), C.int(k),
		C.int(len(watch)), b.step.watch, b.step.topIDs, b.step.topP, b.step.watchP, b.errBuf, C.LA_ERR_LEN) != 0 {
		return b.failure("step")
	}
	ids := unsafe.Slice((*int32)(unsafe.Pointer(b.step.topIDs)), len(rows)*k)
	ps := unsafe.Slice((*float32)(unsafe.Pointer(b.step.topP)), len(rows)*k)
	wp := unsafe.Slice((*float32)(unsafe.Pointer(b.step.watchP)), len(rows)*len(watch))
	for i, r := range rows {
		copy(r.TopIDs, ids[i*k:(i+1)*k])
		copy(r.TopProbs, ps[i*k:(i+1)*k])
		copy(r.Watch, wp[i*len(watch):(i+1)*len(watch)])
	}
	return nil
}

// checkStepSlot refuses a slot's part of a step the C side would refuse, with the Go-side
// numbers: at most MaxSeqLen pending ids (a prompt, on a free slot; the backend allows a
// live slot StepMaxRows), a block of at most StepMaxRows, and one of the two.
func (b *Backend) checkStepSlot(s engine.StepSlot) error {
	switch {
	case s.Slot < 0 || s.Slot >= b.maxBatch:
		return fmt.Errorf("native %s: step: slot %d out of range 0..%d", b.name, s.Slot, b.maxBatch-1)
	case len(s.Pending) == 0 && len(s.Block) == 0:
		return fmt.Errorf("native %s: step: slot %d: 0 pending and 0 block tokens (an empty prompt): a step needs a pending token or a block", b.name, s.Slot)
	case len(s.Pending) > b.maxSeqLen:
		return fmt.Errorf("native %s: step: slot %d: a prompt of %d tokens is longer than max_seq_len %d", b.name, s.Slot, len(s.Pending), b.maxSeqLen)
	case len(s.Block) > engine.StepMaxRows:
		return fmt.Errorf("native %s: step: slot %d: a block of %d rows, at most %d", b.name, s.Slot, len(s.Block), engine.StepMaxRows)
	}
	return nil
}

// Release frees a slot; releasing a free slot is not an error.
func (b *Backend) Release(slot int) error {
	if b.eng == nil {
		return ErrClosed
	}
	if slot < 0 || slot >= b.maxBatch {
		return fmt.Errorf("native %s: release: slot %d out of range 0..%d", b.name, slot, b.maxBatch-1)
	}
	if C.la_release(b.ops, b.eng, C.int(slot), b.errBuf, C.LA_ERR_LEN) != 0 {
		return b.failure("release")
	}
	return nil
}

// Reset releases every slot and forgets the image embeddings.
func (b *Backend) Reset() error {
	if b.eng == nil {
		return ErrClosed
	}
	if C.la_reset(b.ops, b.eng, b.errBuf, C.LA_ERR_LEN) != 0 {
		return b.failure("reset")
	}
	return nil
}

// Logits returns a copy of output row row's logits (vocab floats) from the last Step, or
// nil before the first step and on a backend that does not keep them (a ttnn adapter's
// logits function is optional).
func (b *Backend) Logits(row int) []float32 {
	if b.eng == nil {
		return nil
	}
	var n C.int
	p := C.la_logits(b.ops, b.eng, C.int(row), &n)
	if p == nil || n <= 0 {
		return nil
	}
	return append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(p)), int(n))...)
}

// ImageEmbeddings returns a copy of the kept image embeddings, n rows of dim floats, or
// nil when the backend does not expose them (optional for a ttnn adapter).
func (b *Backend) ImageEmbeddings() (data []float32, n, dim int) {
	if b.eng == nil {
		return nil, 0, 0
	}
	var nt, d C.int
	p := C.la_image_embeddings(b.ops, b.eng, &nt, &d)
	if p == nil || nt <= 0 || d <= 0 {
		return nil, 0, 0
	}
	total := int(nt) * int(d)
	return append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(p)), total)...), int(nt), int(d)
}

// Close frees the engine and its threads. Further calls return ErrClosed.
func (b *Backend) Close() error {
	if b.eng == nil {
		return nil
	}
	C.la_close(b.ops, b.eng)
	b.eng = nil
	b.freeBuffers()
	return nil
}
