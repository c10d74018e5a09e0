package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
)

// run is one request: vision, prefill, a few decode steps; it returns the tokens, the
// first-step logits and the image embeddings.
type runResult struct {
	tokens []int32
	logits []float32
	emb    []float32
}

func runRequest(t *testing.T, b *Backend, gh, gw int, seed uint64, steps int) runResult {
	t.Helper()
	r, err := runRequestErr(b, gh, gw, seed, steps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func runRequestErr(b *Backend, gh, gw int, seed uint64, steps int) (runResult, error) {
	if err := b.Vision(testPatches(gh, gw, seed), gh, gw); err != nil {
		return runResult{}, fmt.Errorf("vision: %w", err)
	}
	emb, n, dim := b.ImageEmbeddings()
	if n != gh*gw/4 || dim <= 0 || len(emb) != n*dim {
		return runResult{}, fmt.Errorf("image embeddings: %d x %d (%d floats), want %d rows", n, dim, len(emb), gh*gw/4)
	}
	tok, err := prefill1(b, testPrompt(n))
	if err != nil {
		return runResult{}, fmt.Errorf("prefill: %w", err)
	}
	r := runResult{tokens: []int32{tok}, logits: b.Logits(0), emb: emb}
	for range steps {
		if tok, err = decode1(b, tok); err != nil {
			return r, fmt.Errorf("decode: %w", err)
		}
		r.tokens = append(r.tokens, tok)
	}
	return r, nil
}

func TestRequestIsDeterministicAcrossResetAndEngines(t *testing.T) {
	lockThread(t)
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			m := openModel(t, tinyCheckpoint{dtype: dt, lmHead: dt == checkpoint.BF16}.write(t))
			a := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 128, Threads: 2})
			b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 128, Threads: 1})

			first := runRequest(t, a, 4, 8, 1, 8)
			if len(first.logits) != 152681 {
				t.Fatalf("logits: %d floats, want the vocabulary 152681", len(first.logits))
			}
			if first.tokens[0] != argmax(first.logits) {
				t.Fatalf("prefill returned %d, argmax of its logits is %d", first.tokens[0], argmax(first.logits))
			}
			// A different request in between must leave nothing behind after Reset.
			if err := a.Reset(); err != nil {
				t.Fatal(err)
			}
			runRequest(t, a, 6, 4, 2, 3)
			if err := a.Reset(); err != nil {
				t.Fatal(err)
			}
			again := runRequest(t, a, 4, 8, 1, 8)
			if !slices.Equal(first.tokens, again.tokens) || !slices.Equal(first.logits, again.logits) {
				t.Fatalf("repeated request after reset differs: tokens %v then %v", first.tokens, again.tokens)
			}
			// A second engine on the same mapping, with another thread count, interleaved.
			other := runRequest(t, b, 4, 8, 1, 8)
			if !slices.Equal(first.tokens, other.tokens) {
				t.Fatalf("second engine: tokens %v, first engine %v", other.tokens, first.tokens)
			}
			if d := relDiff(other.logits, first.logits); d > 1e-5 {
				t.Fatalf("second engine: logits differ by %g relative", d)
			}
			if d := relDiff(other.emb, first.emb); d > 1e-5 {
				t.Fatalf("second engine: embeddings differ by %g relative", d)
			}
		})
	}
}

func TestPrefillNeedsAFreeSlotAndStartsFromPositionZero(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.BF16}.write(t))
	b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 64})
	ids := []int32{151644, 872, 198, 9707, 151645}
	first, err := prefill1(b, ids)
	if err != nil {
		t.Fatal(err)
	}
	want := b.Logits(0)
	if _, err := decode1(b, first); err != nil {
		t.Fatal(err)
	}
	// A live slot takes no new prompt (a step there appends at most 16 pending tokens);
	// once released, the same prompt starts again from position 0.
	if _, err := prefill1(b, slices.Repeat(ids, 4)); err == nil || !strings.Contains(err.Error(), "want 1..16 in all on a live slot") {
		t.Fatalf("prefill into a live slot: %v, want an error", err)
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	if b.Logits(0) != nil {
		t.Error("logits still exposed after release")
	}
	if _, err := prefill1(b, ids); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Logits(0), want) {
		t.Fatal("second prefill of the same prompt gave different logits")
	}
}

func TestBadInputsReturnErrors(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.BF16}.write(t))
	b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 32})

	expectErr := func(what string, err error, substr string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), substr) {
			t.Errorf("%s: error %v, want one containing %q", what, err, substr)
		}
	}
	// A step on a free slot is its prefill: one token is a prompt.
	if _, err := decode1(b, 1); err != nil {
		t.Errorf("a one-token step on the free slot: %v", err)
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	expectErr("odd grid", b.Vision(testPatches(3, 4, 1), 3, 4), "multiples of the 2-patch merge")
	expectErr("patch count", b.Vision(testPatches(4, 4, 1)[:100], 4, 4), "needs")
	expectErr("zero grid", b.Vision(nil, 0, 4), "out of range")
	expectErr("grid beyond max_seq_len", b.Vision(testPatches(16, 12, 1), 16, 12), "more than max_seq_len")
	expectErr("empty prompt", second(prefill1(b, nil)), "empty prompt")
	expectErr("long prompt", second(prefill1(b, make([]int32, 33))), "longer than max_seq_len 32")
	expectErr("id too large", second(prefill1(b, []int32{1, 152681})), "outside the vocabulary")
	expectErr("negative id", second(prefill1(b, []int32{-5})), "outside the vocabulary")
	expectErr("image tokens without vision", second(prefill1(b, testPrompt(2))), "0 embeddings")

	if err := b.Vision(testPatches(4, 4, 1), 4, 4); err != nil {
		t.Fatal(err)
	}
	expectErr("too few image tokens", second(prefill1(b, testPrompt(3))), "3 image tokens")
	tok, err := prefill1(b, testPrompt(4)[:16])
	if err == nil {
		t.Fatalf("prefill with 1 of 4 image tokens gave %d, want an error", tok)
	}
	tok, err = prefill1(b, testPrompt(4))
	if err != nil {
		t.Fatalf("valid prefill after errors: %v", err)
	}
	expectErr("decode id out of range", second(decode1(b, 152681)), "outside the vocabulary")
	// Fill the cache to max_seq_len: the next decode must refuse, not write past it.
	for i := len(testPrompt(4)); i < 32; i++ {
		if tok, err = decode1(b, tok); err != nil {
			t.Fatalf("decode at position %d: %v", i, err)
		}
	}
	expectErr("decode past max_seq_len", second(decode1(b, tok)), "over max_seq_len 32")

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := prefill1(b, []int32{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("prefill after close: %v, want ErrClosed", err)
	}
	if b.Logits(0) != nil {
		t.Error("logits after close should be nil")
	}
}

func second[T any](_ T, err error) error { return err }

func TestOpenRejectsBadCheckpointsAndOptions(t *testing.T) {
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.BF16}.write(t))
	// The checkpoint package checks shapes too; edit an opened Model's table so the
	// backend's own checks are the ones under test.
	edited := func(edit func(ts []checkpoint.Tensor) []checkpoint.Tensor) *checkpoint.Model {
		c := *m
		c.Tensors = edit(slices.Clone(m.Tensors))
		return &c
	}
	index := func(ts []checkpoint.Tensor, name string) int {
		i := slices.IndexFunc(ts, func(x checkpoint.Tensor) bool { return x.Name == name })
		if i < 0 {
			t.Fatalf("fixture has no %s", name)
		}
		return i
	}
	const up = "language_model.model.layers.1.mlp.up_proj.weight"
	cases := []struct {
		name  string
		model *checkpoint.Model
		want  string
	}{
		{"wrong shape", edited(func(ts []checkpoint.Tensor) []checkpoint.Tensor {
			ts[index(ts, up)].Shape = []int64{32, 48}
			return ts
		}), "tensor " + up + ": shape [32,48], config wants [48,32]"},
		{"missing", edited(func(ts []checkpoint.Tensor) []checkpoint.Tensor {
			return slices.Delete(ts, index(ts, "mlp1.0.bias"), index(ts, "mlp1.0.bias")+1)
		}), "tensor mlp1.0.bias: missing"},
		{"short data", edited(func(ts []checkpoint.Tensor) []checkpoint.Tensor {
			i := index(ts, "language_model.model.norm.weight")
			ts[i].Data = ts[i].Data[:10]
			return ts
		}), "tensor language_model.model.norm.weight: 10 bytes of data"},
		{"dtype", edited(func(ts []checkpoint.Tensor) []checkpoint.Tensor {
			ts[index(ts, "mlp1.1.bias")].DType = 7
			return ts
		}), "tensor mlp1.1.bias: unsupported dtype 7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Open("cpu", c.model, Options{MaxBatch: 1, MaxSeqLen: 16})
			if err == nil {
				b.Close()
				t.Fatal("open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to contain %q", err, c.want)
			}
		})
	}

	if _, err := Open("tpu", m, Options{}); err == nil || !strings.Contains(err.Error(), `unknown backend "tpu"`) {
		t.Errorf("unknown backend: %v", err)
	}
	if _, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: -1}); err == nil {
		t.Error("negative MaxSeqLen accepted")
	}
	if _, err := Open("cpu", nil, Options{}); err == nil {
		t.Error("nil model accepted")
	}
	for opt, want := range map[string]string{"widen_blok_bytes": "options: unknown key widen_blok_bytes",
		"widen_block_bytes": "options: widen_block_bytes=lots: want a byte count",
		"kernels":           "options: kernels=lots: want auto, avx512, avx2 or plain"} {
		_, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: 16, BackendOptions: map[string]string{opt: "lots"}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("option %s=lots: error %v, want %q", opt, err, want)
		}
	}
}

func TestDotKernelsMatchPlainC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 15, 16, 17, 63, 64, 65, 130, 2048, 2051} {
		x := make([]float32, n)
		w := make([]float32, n)
		for i := range x {
			x[i], w[i] = 2*rng.Float32()-1, 2*rng.Float32()-1
		}
		for _, dt := range []checkpoint.DType{checkpoint.F32, checkpoint.F16, checkpoint.BF16} {
			row, exact := encodeRow(w, dt)
			var want float64
			for i := range x {
				want += float64(exact[i]) * float64(x[i])
			}
			tol := 1e-5 * float64(n)
			for _, set := range kernelSets {
				got, isa := dotProbe(set, dt, row, x)
				if isa == "none" {
					continue // no AVX2 on this CPU
				}
				if !(math.Abs(float64(got)-want) <= tol) {
					t.Errorf("%v n=%d: %s kernels (%s) %g, exact %g", dt, n, set, isa, got, want)
				}
			}
		}
	}
}

// encodeRow stores w as dtype and returns the bytes and the values they hold exactly.
func encodeRow(w []float32, dt checkpoint.DType) ([]byte, []float32) {
	var out []byte
	exact := make([]float32, len(w))
	for i, f := range w {
		switch dt {
		case checkpoint.F32:
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
			exact[i] = f
		case checkpoint.BF16:
			h := bf16Bits(f)
			out = binary.LittleEndian.AppendUint16(out, h)
			exact[i] = math.Float32frombits(uint32(h) << 16)
		case checkpoint.F16:
			h, v := f16Round(f)
			out = binary.LittleEndian.AppendUint16(out, h)
			exact[i] = v
		}
	}
	return out, exact
}

// f16Round encodes |f| < 1 as IEEE half (normal range, truncating) and returns its value.
func f16Round(f float32) (uint16, float32) {
	var sign uint16
	if f < 0 {
		sign, f = 0x8000, -f
	}
	if f < 1.0/16384 {
		return sign, 0
	}
	e := int(math.Floor(math.Log2(float64(f))))
	mant := uint16(float64(f)/math.Ldexp(1, e)*1024) - 1024
	h := sign | uint16(e+15)<<10 | mant
	v := float32(math.Ldexp(1+float64(mant)/1024, e))
	if sign != 0 {
		v = -v
	}
	return h, v
}

func TestBicubicMatchesTorch(t *testing.T) {
	// A [3, 4, 2] table of x*x*0.1 - x over x = 0..23, resized by
	// torch.nn.functional.interpolate(mode="bicubic", align_corners=False) (torch 1.13).
	in := make([]float32, 24)
	for i := range in {
		x := float32(i)
		in[i] = x*x*0.1 - x
	}
	cases := []struct {
		oh, ow int
		want   []float32
	}{
		{5, 2, []float32{-0.6962000727653503, -1.587300181388855, -3.1182000637054443, -3.1342995166778564, -1.7413973808288574, -1.9732965230941772, -1.2793940305709839, -0.6362936496734619, -1.0249992609024048, -0.16249871253967285, 4.225001811981201, 5.962501049041748, 6.603401184082031, 8.560300827026367, 16.641399383544922, 19.473302841186523, 12.675003051757812, 15.291102409362793, 25.597003936767578, 29.088106155395508}},
		{2, 7, []float32{-0.6582739949226379, -1.2917107343673706, -1.0812029838562012, -1.563254714012146, -1.6785883903503418, -1.9137009382247925, -1.9875000715255737, -1.9812498092651367, -1.9048659801483154, -1.6572535037994385, -1.5389858484268188, -1.0444344282150269, -1.2579796314239502, -0.6120433211326599, 6.590784072875977, 8.544848442077637, 8.12639045715332, 10.231837272644043, 10.723775863647461, 13.076163291931152, 13.537500381469727, 16.13125228881836, 16.74276351928711, 19.577877044677734, 20.303417205810547, 23.385467529296875, 22.542966842651367, 25.776403427124023}},
		{3, 4, in}, // same size: identity
	}
	for _, c := range cases {
		got := bicubicProbe(in, 3, 4, 2, c.oh, c.ow)
		for i := range got {
			if math.Abs(float64(got[i]-c.want[i])) > 1e-5*(1+math.Abs(float64(c.want[i]))) {
				t.Errorf("%dx%d [%d]: %g, torch %g", c.oh, c.ow, i, got[i], c.want[i])
			}
		}
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// relDiff is max|a-b| / max|b|: the parity measure used throughout this package.
func relDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range a {
		num = math.Max(num, math.Abs(float64(a[i])-float64(b[i])))
		den = math.Max(den, math.Abs(float64(b[i])))
	}
	if den == 0 {
		return num
	}
	return num / den
}

func TestTwoEnginesRunConcurrently(t *testing.T) {
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	// Each engine is driven by its own goroutine locked to its own OS thread, as two chips
	// would be; both run the same request at the same time.
	results := make([]runResult, 2)
	errs := make(chan error, 2)
	for i := range results {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: 128, Threads: 1 + i})
			if err != nil {
				errs <- err
				return
			}
			defer b.Close()
			r, err := runRequestErr(b, 6, 8, 5, 6)
			results[i] = r
			errs <- err
		}()
	}
	for range results {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(results[0].tokens, results[1].tokens) {
		t.Fatalf("concurrent engines disagree: %v vs %v", results[0].tokens, results[1].tokens)
	}
	if d := relDiff(results[0].logits, results[1].logits); d > 1e-5 {
		t.Fatalf("concurrent engines: logits differ by %g relative", d)
	}
}
