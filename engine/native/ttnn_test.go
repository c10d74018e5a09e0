package native

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/checkpoint/golden"
)

// The ttnn backend's tests run it with the numpy stand-in adapter (engine/ttnn), which
// computes the real architecture on the host: they prove the embedded-CPython bridge and
// the adapter protocol end to end. They need Debian's libpython3.11 and python3-numpy.

// The ttnn backend reads no environment: every setting is an option line. These tests call
// Open directly, so they give what the worker and the pipeline would: the adapter, where it
// lives, and canon_grid, the grid the host side resizes to (the pipeline adds it).

// adapterOptions are the option lines for the adapter module in dir, with canon_grid
// "native" (the tests here feed patches at many grids, as the pipeline does with
// LA_CANON_GRID=native) and extra key, value pairs on top.
func adapterOptions(adapter, dir string, extra ...string) map[string]string {
	o := map[string]string{"adapter": adapter, "path": dir, "canon_grid": "native"}
	for i := 0; i+1 < len(extra); i += 2 {
		o[extra[i]] = extra[i+1]
	}
	return o
}

// standinOptions selects the stand-in adapter (engine/ttnn) through the option lines.
func standinOptions(t testing.TB, extra ...string) map[string]string {
	t.Helper()
	dir, err := filepath.Abs("../ttnn")
	if err != nil {
		t.Fatal(err)
	}
	return adapterOptions("la_ttnn_standin", dir, extra...)
}

// openTTNN opens the ttnn backend and closes it when the test ends.
func openTTNN(t testing.TB, m *checkpoint.Model, o Options) *Backend {
	t.Helper()
	b, err := Open("ttnn", m, o)
	if err != nil {
		t.Fatalf("open ttnn backend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// goldenRun is what one request through a backend produced.
type goldenRun struct {
	emb    []float32
	logits []float32
	tokens []int32
}

// runGoldenCase feeds a golden case's inputs to b and greedy-decodes as many tokens as the
// golden holds.
func runGoldenCase(t *testing.T, b *Backend, c *golden.Case) goldenRun {
	t.Helper()
	if err := b.Reset(); err != nil {
		t.Fatalf("%s reset: %v", b.Name(), err)
	}
	patches, _, err := c.Float32(golden.Patches)
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err := c.Int32(golden.PromptIDs)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
		t.Fatalf("%s vision: %v", b.Name(), err)
	}
	var r goldenRun
	r.emb, _, _ = b.ImageEmbeddings()
	tok, err := prefill1(b, ids)
	if err != nil {
		t.Fatalf("%s prefill: %v", b.Name(), err)
	}
	r.logits = b.Logits(0)
	r.tokens = []int32{tok}
	for len(r.tokens) < len(c.GreedyIDs) {
		if tok, err = decode1(b, tok); err != nil {
			t.Fatalf("%s decode step %d: %v", b.Name(), len(r.tokens), err)
		}
		r.tokens = append(r.tokens, tok)
	}
	return r
}

func checkClose(t *testing.T, what string, got, want []float32) {
	t.Helper()
	d, err := golden.Compare(got, want)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !d.Within(parityTolerance) {
		t.Errorf("%s: %v, tolerance %g", what, d, parityTolerance)
	} else {
		t.Logf("%s: %v", what, d)
	}
}

// TestTTNNStandinMatchesCPUBackend is the parity test of issue 8: on the committed goldens'
// inputs the ttnn backend with the stand-in adapter produces exactly the CPU backend's
// greedy tokens, and embeddings and logits within the parity tolerance.
func TestTTNNStandinMatchesCPUBackend(t *testing.T) {
	lockThread(t)
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		t.Run(ckpt, func(t *testing.T) {
			dir := filepath.Join(checkpointsDir, ckpt)
			set, err := golden.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			m := openModel(t, dir)
			cpu := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2})
			ttnn := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: 512, BackendOptions: standinOptions(t)})
			if ttnn.Name() != "ttnn" {
				t.Fatalf("backend name %q, want ttnn", ttnn.Name())
			}
			for i := range set.Cases {
				c := &set.Cases[i]
				t.Run(c.Name, func(t *testing.T) {
					want := runGoldenCase(t, cpu, c)
					got := runGoldenCase(t, ttnn, c)
					if !slices.Equal(got.tokens, want.tokens) {
						t.Errorf("greedy tokens\nttnn %v\n cpu %v", got.tokens, want.tokens)
					}
					if !slices.Equal(got.tokens, c.GreedyIDs) {
						t.Errorf("greedy tokens\nttnn   %v\ngolden %v", got.tokens, c.GreedyIDs)
					}
					checkClose(t, "image embeddings vs cpu", got.emb, want.emb)
					checkClose(t, "first-step logits vs cpu", got.logits, want.logits)
					wantLogits, _, err := c.Float32(golden.PrefillLogits)
					if err != nil {
						t.Fatal(err)
					}
					checkClose(t, "first-step logits vs golden", got.logits, wantLogits)
				})
			}
		})
	}
}

// TestTTNNRepeatedRequestsAndEngines: a request repeated after Reset (with another one in
// between) gives identical results, and so does a second engine driven concurrently from
// another OS thread (each call takes the GIL on its own thread).
func TestTTNNRepeatedRequestsAndEngines(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.BF16, lmHead: true}.write(t))
	b := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: 128, BackendOptions: standinOptions(t)})

	first := runRequest(t, b, 4, 8, 1, 6)
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	runRequest(t, b, 6, 4, 2, 3)
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	again := runRequest(t, b, 4, 8, 1, 6)
	if !slices.Equal(first.tokens, again.tokens) || !slices.Equal(first.logits, again.logits) ||
		!slices.Equal(first.emb, again.emb) {
		t.Fatalf("repeated request after reset differs: tokens %v then %v", first.tokens, again.tokens)
	}

	type result struct {
		tokens []int32
		err    error
	}
	done := make(chan result)
	opts := Options{MaxBatch: 1, MaxSeqLen: 128, BackendOptions: standinOptions(t)}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		other, err := Open("ttnn", m, opts)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer other.Close()
		var r result
		r.err = func() error {
			if err := other.Vision(testPatches(4, 8, 1), 4, 8); err != nil {
				return err
			}
			tok, err := prefill1(other, testPrompt(8))
			r.tokens = append(r.tokens, tok)
			for range 6 {
				if err != nil {
					return err
				}
				tok, err = decode1(other, tok)
				r.tokens = append(r.tokens, tok)
			}
			return err
		}()
		done <- r
	}()
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	meanwhile := runRequest(t, b, 4, 8, 1, 6) // interleaves with the other thread's calls
	r := <-done
	if r.err != nil {
		t.Fatalf("second engine on another thread: %v", r.err)
	}
	if !slices.Equal(r.tokens, first.tokens) || !slices.Equal(meanwhile.tokens, first.tokens) {
		t.Fatalf("tokens: first %v, concurrent same engine %v, second engine %v", first.tokens, meanwhile.tokens, r.tokens)
	}
}

// TestTTNNPythonExceptionsBecomeErrors: an exception in any step reaches Go as an error
// with its type, message and where it was raised, and the engine stays usable.
func TestTTNNPythonExceptionsBecomeErrors(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))

	_, err := Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: standinOptions(t, "fail_in", "open")})
	wantError(t, err, "adapter open: RuntimeError: stand-in told to fail in open", "la_ttnn_standin.py:")

	b := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: standinOptions(t, "fail_in", "step")})
	if err := b.Vision(testPatches(2, 2, 1), 2, 2); err != nil {
		t.Fatal(err)
	}
	tok, err := prefill1(b, testPrompt(1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = decode1(b, tok)
	wantError(t, err, "adapter step: RuntimeError: stand-in told to fail in step", "in _maybe_fail)")

	// ValueErrors of bad input, raised inside the adapter, come back the same way; the
	// engine answers the next request.
	good := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: standinOptions(t)})
	wantError(t, good.Vision(testPatches(3, 3, 1), 3, 3), "adapter vision: ValueError: grid 3x3 is not a positive multiple of the merge kernel 2")
	_, err = prefill1(good, testPrompt(4))
	wantError(t, err, "ValueError: prompt has 4 image tokens but 0 image embeddings are kept")
	_, err = prefill1(good, make([]int32, 65))
	wantError(t, err, "prompt of 65 tokens is longer than max_seq_len 64")
	if err := good.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := good.Vision(testPatches(2, 4, 1), 2, 4); err != nil {
		t.Fatalf("vision after errors: %v", err)
	}
	if _, err := prefill1(good, testPrompt(2)); err != nil {
		t.Fatalf("prefill after errors: %v", err)
	}
}

// TestTTNNBrokenAdapters: a missing module, a module of the first protocol (no release),
// and an adapter that returns nonsense give clear errors, and a failed call writes nothing
// to the caller's outputs.
func TestTTNNBrokenAdapters(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name+".py"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("la_test_first_protocol", `
def open(config): return {}
def vision(h, p, gh, gw): pass
def prefill(h, slot, ids, want_prob): return 1, None
def decode(h, slots, tokens, want_prob): return [1] * len(slots), None
def release(h, slot): pass
def reset(h): pass
def close(h): pass
`)
	write("la_test_bad_results", badResultsAdapter)
	opts := func(adapter string) Options {
		return Options{MaxBatch: 2, MaxSeqLen: 64, BackendOptions: adapterOptions(adapter, dir)}
	}

	_, err := Open("ttnn", m, opts("la_no_such_adapter"))
	wantError(t, err, "importing adapter module la_no_such_adapter", "ModuleNotFoundError")

	// An adapter of the protocol before ABI 4 (prefill and decode, no step) is refused.
	_, err = Open("ttnn", m, opts("la_test_first_protocol"))
	wantError(t, err, "adapter module la_test_first_protocol has no function step()",
		"needs open, vision, step, release, reset, close")

	b := openTTNN(t, m, opts("la_test_bad_results"))
	// A prefill: the first id picks the adapter's answer; the slot stays free after each.
	for _, c := range []struct {
		kind int32
		want string
	}{
		{1, "adapter step: adapter returned token 1000000000 for row 0, outside the vocabulary of 152681"},
		{2, "adapter step: adapter returned a int of rows, want a list of 1"},
		{3, "adapter step: adapter returned probability 1.5 for row 0, want a number in [0, 1]"},
		{4, "adapter step: probability of row 0: TypeError"},
		{5, "adapter step: token of row 0: TypeError"},
	} {
		_, _, err := prefillStep(b, 0, []int32{c.kind, 1})
		wantError(t, err, c.want)
	}
	for slot := range 2 {
		if tok, prob, err := prefillStep(b, slot, []int32{0, 1}); err != nil || tok != 7 || prob != 0.25 {
			t.Fatalf("prefill slot %d after refused results: %d, %g, %v; want 7, 0.25", slot, tok, prob, err)
		}
	}

	// A decode: the first token picks the answer. A refused result leaves the caller's
	// outputs as they were, even when its tokens were fine and only the probabilities not.
	out, probs := cOutputs(b)
	for _, c := range []struct {
		kind int32
		want string
	}{
		{6, "adapter step: adapter returned 1 rows for 2 rows"},
		{7, "adapter step: adapter returned probability nan for row 0, want a number in [0, 1]"},
		{2, "adapter step: adapter returned a int of rows, want a list of 2"},
		{1, "adapter step: adapter returned token 1000000000 for row 0, outside the vocabulary of 152681"},
	} {
		for i := range out {
			out[i], probs[i] = -9, -9
		}
		next, prob := []int32{-5, -5}, []float32{-5, -5}
		err := decodeStep(b, []int{0, 1}, []int32{c.kind, 0}, next, prob)
		wantError(t, err, c.want)
		if !slices.Equal(out, []int32{-9, -9}) || !slices.Equal(probs, []float32{-9, -9}) ||
			!slices.Equal(next, []int32{-5, -5}) || !slices.Equal(prob, []float32{-5, -5}) {
			t.Fatalf("kind %d: a refused decode wrote outputs: C %v %v, Go %v %v", c.kind, out, probs, next, prob)
		}
	}
	next, prob := []int32{0, 0}, []float32{0, 0}
	if err := decodeStep(b, []int{1, 0}, []int32{0, 0}, next, prob); err != nil || !slices.Equal(next, []int32{7, 7}) ||
		!slices.Equal(prob, []float32{0.25, 0.25}) {
		t.Fatalf("decode after refused results: %v %v %v; want [7 7] [0.25 0.25]", next, prob, err)
	}
	if got := b.Logits(0); got != nil {
		t.Errorf("an adapter without logits() gave %d logits", len(got))
	}

	_, err = Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: standinOptions(t, "path", "a\nb")})
	wantError(t, err, "values no newline")

	// The adapter has no default: an absent or empty option is an error before Python.
	for _, o := range []map[string]string{adapterOptions("", dir), {"path": dir, "canon_grid": "native"}} {
		_, err = Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: o})
		wantError(t, err, "open ttnn backend", ": no adapter option: the worker passes LA_TTNN_ADAPTER as option adapter")
	}
	_, err = Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: adapterOptions(strings.Repeat("m", 300), dir)})
	wantError(t, err, "option adapter: value longer than 255 bytes")
}

// badResultsAdapter answers a step by its first slot's first pending id: 0 is a good
// answer (token 7, probability 0.25, each row), the others each a way of getting the
// protocol's result wrong.
const badResultsAdapter = `
def open(config):
    assert config["vocab"] == 152681 and config["weights_dir"] and config["max_batch"] == 2, config
    return {}
def vision(h, p, gh, gw): pass
def step(h, slots, pending, blocks, no_output, k, watch):
    kind, n = pending[0][0], len(slots)
    if kind == 1: return [([10**9], [0.25], [])] * n
    if kind == 2: return 7
    if kind == 3: return [([7], [1.5], [])] * n
    if kind == 4: return [([7], [None], [])] * n
    if kind == 5: return [(["seven"], [0.25], [])] * n
    if kind == 6: return [([7], [0.25], [])] * (n - 1)
    if kind == 7: return [([7], [float("nan")], [])] * n
    return [([7], [0.25], [])] * n
def release(h, slot): pass
def reset(h): pass
def close(h): pass
`

// cOutputs are the C-side next-token and probability buffers a Backend hands the backend
// (its step's output buffers), for checking that a failed call wrote nothing there.
func cOutputs(b *Backend) ([]int32, []float32) {
	return unsafe.Slice((*int32)(unsafe.Pointer(b.step.topIDs)), b.maxBatch),
		unsafe.Slice((*float32)(unsafe.Pointer(b.step.topP)), b.maxBatch)
}

// TestTTNNIgnoresTheEnvironment: the backend takes its settings from the option lines only.
// The worker's variables in the environment neither stand in for a missing option nor
// change what the options say.
func TestTTNNIgnoresTheEnvironment(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))

	// Variables naming a working adapter are not a fallback: no adapter option, no engine.
	// (The probe's directory is new to this process, so only LA_TTNN_PATH could put it on
	// sys.path.)
	probeDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(probeDir, "la_env_probe.py"), []byte(noopAdapter), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LA_TTNN_ADAPTER", "la_env_probe")
	t.Setenv("LA_TTNN_PATH", probeDir)
	_, err := Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: map[string]string{"canon_grid": "native"}})
	wantError(t, err, "no adapter option")
	_, err = Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: adapterOptions("la_env_probe", "")})
	wantError(t, err, "importing adapter module la_env_probe", "ModuleNotFoundError")

	// Bogus variables change nothing: the stand-in opens from its options and answers as
	// the CPU backend does.
	for name, value := range map[string]string{
		"LA_TTNN_ADAPTER": "la_no_such_adapter", "LA_TTNN_PATH": "/no/such/dir",
		"LA_PYTHON_LIB": "libpython-la-none.so", "LA_PYTHON_SITE": "/no/such/site",
		"LA_LLM_DIR": "/no/such/llm", "LA_CANON_GRID": "bogus", "LA_PREC": "fast", "LA_TRACE": "maybe",
		"TT_MESH_SHAPE": "8x4", "TT_DEVICE_ID": "x",
	} {
		t.Setenv(name, value)
	}
	b := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: standinOptions(t)})
	cpu := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 2})
	got, want := runRequest(t, b, 2, 4, 1, 4), runRequest(t, cpu, 2, 4, 1, 4)
	if !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("stand-in tokens %v under bogus variables, cpu %v", got.tokens, want.tokens)
	}
}

// TestTTNNProcessWideBehaviour runs its checks in child processes: libpython is loaded
// and the interpreter configured once per process, so these can only be seen in a process
// where no other test started Python.
func TestTTNNProcessWideBehaviour(t *testing.T) {
	switch os.Getenv("LA_TTNN_CHILD") {
	case "":
	case "missing-libpython":
		childMissingLibpython(t)
		return
	case "stdout":
		childPrintGoesToStderr(t)
		return
	default:
		t.Fatalf("unknown LA_TTNN_CHILD %q", os.Getenv("LA_TTNN_CHILD"))
	}
	for _, mode := range []string{"missing-libpython", "stdout"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestTTNNProcessWideBehaviour$", "-test.v")
			cmd.Env = append(os.Environ(), "LA_TTNN_CHILD="+mode)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err != nil || !strings.Contains(stdout.String(), "child checks passed") {
				t.Fatalf("child process: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			if mode == "stdout" {
				// The adapter's print() must not reach the worker's stdout.
				if strings.Contains(stdout.String(), "LA_PRINT_PROBE") || !strings.Contains(stderr.String(), "LA_PRINT_PROBE") {
					t.Fatalf("print() in an adapter: stdout %q, stderr %q; want it on stderr only", stdout.String(), stderr.String())
				}
			}
		})
	}
}

// childMissingLibpython: a libpython that does not load is a clear error, and the next
// open may still load the default one.
func childMissingLibpython(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))
	_, err := Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: standinOptions(t, "python_lib", "libpython-la-none.so")})
	wantError(t, err, "loading libpython: libpython-la-none.so", "LA_PYTHON_LIB")
	b, err := Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: standinOptions(t)})
	if err != nil {
		t.Fatalf("after a failed load, the default libpython: %v", err)
	}
	b.Close()
	fmt.Println("child checks passed")
}

// childPrintGoesToStderr opens an adapter that prints.
func childPrintGoesToStderr(t *testing.T) {
	lockThread(t)
	dir := t.TempDir()
	src := strings.Replace(noopAdapter, "def open(c): return None",
		"import sys\ndef open(c):\n    print('LA_PRINT_PROBE')\n    sys.stdout.flush()\n    return None", 1)
	if err := os.WriteFile(filepath.Join(dir, "la_print_probe.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))
	b, err := Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64, BackendOptions: adapterOptions("la_print_probe", dir)})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	fmt.Println("child checks passed")
}

func wantError(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

// noopAdapter keeps the protocol and computes nothing: every output row's top id is the
// slot's last token (a block's rows: their own), with probability 1.
const noopAdapter = `def open(c): return None
def vision(h, p, gh, gw): pass
def row(t, k, watch):
    others = [i for i in range(k + 1) if i != t][:k - 1]
    return [t] + others, [1.0] + [0.0] * (k - 1), [1.0 if w == t else 0.0 for w in watch]
def step(h, slots, pending, blocks, no_output, k, watch):
    return [row(t, k, watch) for p, b, q in zip(pending, blocks, no_output) if not q for t in (b or p[-1:])]
def release(h, slot): pass
def reset(h): pass
def close(h): pass
`

// BenchmarkTTNNBridgeDecodeCall measures what the bridge itself costs per decode call of 1
// and of 8 rows: a call into an adapter that does nothing (check the slot rules, take the
// GIL, build the argument lists, call, check every row of the result, give the GIL back).
func BenchmarkTTNNBridgeDecodeCall(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "la_bench_noop.py"), []byte(noopAdapter), 0o644); err != nil {
		b.Fatal(err)
	}
	m := openModel(b, tinyCheckpoint{dtype: checkpoint.F32}.write(b))
	for _, rows := range []int{1, 8} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			be := openTTNN(b, m, Options{MaxBatch: rows, MaxSeqLen: 1 << 30, BackendOptions: adapterOptions("la_bench_noop", dir)})
			slots, tokens, next := make([]int, rows), make([]int32, rows), make([]int32, rows)
			for i := range rows {
				slots[i], tokens[i] = i, 7
				if _, _, err := prefillStep(be, i, []int32{1}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				if err := decodeStep(be, slots, tokens, next, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestTTNNPrefillLengthIsTheDevicePadding(t *testing.T) {
	b := &Backend{name: "ttnn"}
	for n, want := range map[int]int{1: 128, 128: 128, 129: 256, 303: 512, 512: 512, 1000: 1024} {
		if got := b.PrefillLength(n); got != want {
			t.Errorf("ttnn PrefillLength(%d) = %d, want %d", n, got, want)
		}
	}
	if got := (&Backend{name: "cpu"}).PrefillLength(303); got != 303 {
		t.Errorf("cpu PrefillLength(303) = %d, want 303 (no padding)", got)
	}
}
