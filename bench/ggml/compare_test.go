package ggml

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/locateanything/detect/bench"
	"github.com/locateanything/detect/engine/checkpoint"
)

// These tests never build the port or load the 3B model: they check that compare.sh
// parses, documents what it accepts, plans the runs it claims, and reads the real output
// of the programs it runs.

const script = "./compare.sh"

// compare runs compare.sh with args and returns its output; it fails the test on a
// non-zero exit.
func compare(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("compare.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// sourced runs a bash snippet with compare.sh's functions defined (sourcing it defines
// them and runs nothing).
func sourced(t *testing.T, snippet string) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", "source "+script+" && "+snippet).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", snippet, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestScriptIsValidBash(t *testing.T) {
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Skip("shellcheck not installed (Debian package shellcheck)")
	}
	if out, err := exec.Command("shellcheck", script).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

var optionRE = regexp.MustCompile(`(?m)^#?\s*(--[a-z][a-z-]+)`)

// TestOptionsAreDocumentedAndAccepted: the options --help lists are the options the
// README's usage and the script's parser know, and each one parses.
func TestOptionsAreDocumentedAndAccepted(t *testing.T) {
	help := compare(t, "--help")
	var opts []string
	for _, m := range optionRE.FindAllStringSubmatch(help, -1) {
		opts = append(opts, m[1])
	}
	if len(opts) < 15 {
		t.Fatalf("--help lists %d options (%v), want all of them", len(opts), opts)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"--ours", "--port-src", "--ggml-src", "--rounds", "--lock", "--configs", "--dry-run"} {
		if !slices.Contains(opts, o) {
			t.Errorf("--help does not list %s", o)
		}
	}
	// The README also quotes the flags of the programs the script runs (worker bench,
	// la_stages), of the checkpoint's generator and the --flag placeholder of --ours;
	// every other one is the script's.
	others := map[string]bool{"--help": true, "--flag": true}
	bench.Flags(bench.Defaults{}).VisitAll(func(f *flag.Flag) { others["--"+f.Name] = true })
	stages, err := os.ReadFile("driver/la_stages.cpp")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"(--[a-z]+)"`).FindAllStringSubmatch(string(stages), -1) {
		others[m[1]] = true
	}
	gen, err := os.ReadFile("../../tools/refmodel/gen_checkpoint.py") // the checkpoint's generator
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`add_argument\("(--[a-z-]+)"`).FindAllStringSubmatch(string(gen), -1) {
		others[m[1]] = true
	}
	for _, m := range regexp.MustCompile("--[a-z][a-z-]+").FindAllString(string(readme), -1) {
		if !others[m] && !slices.Contains(opts, m) {
			t.Errorf("README.md mentions %s, which --help does not list", m)
		}
	}
	values := map[string]string{"--tokens": "8", "--threads": "1", "--rounds": "2", "--first-round": "2", "--jobs": "1", "--parts": "2",
		"--configs": "q8_0", "--ours": "x=/bin/true", "--reference": "q8_0"}
	for _, o := range opts {
		args := []string{o}
		if o != "--dry-run" && o != "--help" {
			v, ok := values[o]
			if !ok {
				v = "/tmp/x"
			}
			args = append(args, v)
		}
		if o == "--reference" {
			args = append(args, "--configs", "q8_0")
		}
		compare(t, append(args, "--help")...)
	}
	// Bad values are refused before anything runs.
	for _, bad := range [][]string{{"--rounds", "0"}, {"--configs", "q4_k"}, {"--ours", "nosource"},
		{"--reference", "nobody"}, {"--frobnicate"}} {
		if out, err := exec.Command("bash", append([]string{script, "--dry-run"}, bad...)...).CombinedOutput(); err == nil {
			t.Errorf("compare.sh %v: accepted\n%s", bad, out)
		}
	}
}

// TestDryRunPlan: the plan builds both ggml variants, converts and quantizes, and runs
// every configuration in alternating rounds, each under the lock, with flags the
// programs it runs have.
func TestDryRunPlan(t *testing.T) {
	work := t.TempDir()
	plan := compare(t, "--dry-run", "--work", work, "--rounds", "2", "--lock", "/tmp/test.lock",
		"--ours", "bf16=/bin/true", "--ours", "q8=/bin/true,LA_WEIGHTS_QUANT=q8")
	for _, want := range []string{
		"-DGGML_LLAMAFILE=OFF", "-DGGML_LLAMAFILE=ON", "driver/la_stages.cpp",
		"92c1682da792c1e8a5dec91acc2be4b02c742ded", "7142aa6bf9fcaeec0fef8d80fcd90afe4268adf1",
		"PYTHONPATH=", "convert_locateanything_to_gguf.py",
		"gguf_parts.py split " + work + "/models/la-f32.gguf " + work + "/models/part-f32 4",
		"quantize " + work + "/models/part-f32.4.gguf " + work + "/models/part-q8_0.4.gguf q8_0",
		"gguf_parts.py join " + work + "/models/la-q8_0.gguf " + work + "/models/part-q8_0.1.gguf",
		"summarize.py --reference bf16",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan has no %q:\n%s", want, plan)
		}
	}
	var order []string
	var stages, workers [][]string
	for _, line := range strings.Split(plan, "\n") {
		if !strings.Contains(line, "la_stages --") && !strings.Contains(line, " bench --") {
			continue
		}
		if !strings.HasPrefix(line, "+ flock /tmp/test.lock /usr/bin/time ") {
			t.Errorf("a run outside the lock or without time: %s", line)
		}
		args := strings.Fields(line)
		switch {
		case strings.Contains(line, "build-llamafile/la_stages --model "+work+"/models/la-q8_0.gguf"):
			order = append(order, "q8_0-llamafile")
		case strings.Contains(line, "build-default/la_stages --model "+work+"/models/la-q8_0.gguf"):
			order = append(order, "q8_0")
		case strings.Contains(line, "build-default/la_stages --model "+work+"/models/la-f32.gguf"):
			order = append(order, "f32")
		case strings.Contains(line, "LA_WEIGHTS_QUANT=q8 "+work+"/bin/worker-q8 bench"):
			order = append(order, "q8")
		case strings.Contains(line, work+"/bin/worker-bf16 bench"):
			order = append(order, "bf16")
		default:
			t.Errorf("unexpected run: %s", line)
		}
		for i, a := range args {
			if strings.HasSuffix(a, "/la_stages") {
				stages = append(stages, args[i+1:])
			}
			if a == "bench" {
				workers = append(workers, args[i+1:])
			}
		}
		if strings.Contains(line, " bench --") && !strings.Contains(line, "OPENBLAS_NUM_THREADS=2") {
			t.Errorf("our run does not hold OpenBLAS to the thread count: %s", line)
		}
	}
	round := []string{"f32", "q8_0", "q8_0-llamafile", "bf16", "q8"}
	if want := append(slices.Clone(round), round...); !slices.Equal(order, want) {
		t.Errorf("runs in order %v, want %v", order, want)
	}
	// worker bench must know every flag the script passes it.
	for _, args := range workers {
		if err := bench.Flags(bench.Defaults{}).Parse(args); err != nil {
			t.Errorf("worker bench %v: %v", args, err)
		}
	}
	// la_stages must parse every flag the script passes it.
	src, err := os.ReadFile("driver/la_stages.cpp")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range stages {
		for _, a := range args {
			if strings.HasPrefix(a, "--") && !strings.Contains(string(src), `"`+a+`"`) {
				t.Errorf("la_stages.cpp does not parse %s", a)
			}
		}
	}
}

// TestParsesWorkerBench runs `worker bench` (package bench) on the tiny checkpoint with
// the flags the script uses and reads its stage times with the script's own function.
func TestParsesWorkerBench(t *testing.T) {
	var out bytes.Buffer
	err := bench.Run([]string{"--weights", "../../testdata/checkpoints/tiny-bf16", "--threads", "2",
		"--grid", "32x32", "--prompt", "295", "--tokens", "4", "--runs", "1", "--stream-mib", "32"}, bench.Defaults{}, &out)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	log := filepath.Join(t.TempDir(), "bench.log")
	if err := os.WriteFile(log, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for stage, line := range map[string]string{
		"vision":  `(?m)^vision .*: ([0-9.]+) ms`,
		"prefill": `(?m)^prefill .*295 tokens: ([0-9.]+) ms`,
		"decode":  `(?m)^decode +4 tokens: ([0-9.]+) ms`,
	} {
		got := sourced(t, "ms_of "+stage+" "+log)
		m := regexp.MustCompile(line).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("%s: no line %q in\n%s", stage, line, out.String())
		}
		if got != m[1] {
			t.Errorf("ms_of %s = %q, the report says %s", stage, got, m[1])
		}
		if v, err := strconv.ParseFloat(got, 64); err != nil || v <= 0 {
			t.Errorf("ms_of %s = %q, not a positive number", stage, got)
		}
	}
}

// TestReadsStagesKeys: every key the script reads from la_stages is one it prints, and
// field reads a key's value (not a longer key's).
func TestReadsStagesKeys(t *testing.T) {
	src, err := os.ReadFile("driver/la_stages.cpp")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	keys := regexp.MustCompile(`field ([a-z_]+) "\$log"`).FindAllStringSubmatch(string(sh), -1)
	if len(keys) < 6 {
		t.Fatalf("found %d field reads in compare.sh", len(keys))
	}
	printed := regexp.MustCompile(`printf\("([a-z_]+) %`).FindAllStringSubmatch(string(src), -1)
	var have []string
	for _, p := range printed {
		have = append(have, p[1])
	}
	for _, k := range keys {
		if k[1] == "peak_rss_kb" || k[1] == "wall_s" { // from /usr/bin/time -f
			continue
		}
		if !slices.Contains(have, k[1]) {
			t.Errorf("compare.sh reads %s, which la_stages.cpp does not print (it prints %v)", k[1], have)
		}
	}
	log := filepath.Join(t.TempDir(), "stages.log")
	text := "load_ms 1234.5\ngrid 32x32\nprompt_tokens 295\nvision_ms 10.5\nprefill_ms 20.0\ndecode_ms 30.25\ndecode_tokens 64\npeak_rss_kb 6000000\nwall_s 12.3\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"grid": "32x32", "prompt_tokens": "295", "decode_ms": "30.25",
		"peak_rss_kb": "6000000", "wall_s": "12.3"} {
		if got := sourced(t, "field "+k+" "+log); got != want {
			t.Errorf("field %s = %q, want %q", k, got, want)
		}
	}
}

// TestSummarize checks the medians and the same-round ratios on a small table.
func TestSummarize(t *testing.T) {
	dir := t.TempDir()
	tsv := filepath.Join(dir, "results.tsv")
	rows := "round\tconfig\tvision_ms\tprefill_ms\tdecode_ms\ttokens\tthreads\tpeak_rss_kb\twall_s\n" +
		// ours: e2e 60, 120, 66 s; port: 120, 180, 198 s, so same-round ratios 2, 1.5, 3.
		"1\tours\t20000\t20000\t20000\t64\t2\t12000000\t70\n" +
		"1\tport\t40000\t40000\t40000\t64\t2\t6000000\t130\n" +
		"2\tours\t40000\t40000\t40000\t64\t2\t12000000\t130\n" +
		"2\tport\t60000\t60000\t60000\t64\t2\t6000000\t190\n" +
		"3\tours\t22000\t22000\t22000\t64\t2\t12000000\t70\n" +
		"3\tport\t66000\t66000\t66000\t64\t2\t6000000\t200\n"
	if err := os.WriteFile(tsv, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "summary.md")
	out, err := exec.Command("python3", "summarize.py", "--reference", "ours", tsv, "--markdown", md).CombinedOutput()
	if err != nil {
		t.Fatalf("summarize.py: %v\n%s", err, out)
	}
	// port: medians vision 60 s, decode 60000/64 = 938 ms/token, e2e 180 s, RSS 6.1 GB;
	// median ratio 2.00 (not 180/66 = 2.73, the ratio of medians).
	for _, want := range []string{
		"| ours | 3 | 22.0 | 22.0 | 344 | 66.0 | 12.3 | 1.00 | 1.00 | 1.00 | 1.00 |",
		"| port | 3 | 60.0 | 60.0 | 938 | 180.0 | 6.1 | 2.00 | 2.00 | 2.00 | 2.00 |",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("summary has no row %q:\n%s", want, out)
		}
	}
	if written, err := os.ReadFile(md); err != nil || string(written) != string(out) {
		t.Errorf("summary.md differs from the printed table (%v)", err)
	}
}

// python returns Debian's python3 when it imports every module named, or skips.
func python(t *testing.T, modules ...string) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).Run(); err != nil {
		t.Skipf("%s cannot import %v (Debian python3-numpy)", py, modules)
	}
	return py
}

// TestGGUFShim writes a file with the stand-in writer, the way the port's converter
// calls it, and reads it back by the format's description.
func TestGGUFShim(t *testing.T) {
	py := python(t, "numpy")
	path := filepath.Join(t.TempDir(), "t.gguf")
	code := `
import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1], "locateanything")
w.add_uint32("a.u32", 7)
w.add_float32("a.f32", 0.5)
w.add_array("a.ints", [2, 2])
w.add_array("a.strs", ["x", "yz"])
w.add_tensor("t.matrix", np.arange(6, dtype=np.float32).reshape(2, 3))
w.add_tensor("t.vector", np.full(5, -1.5, dtype=np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
`
	cmd := exec.Command(py, "-c", code, path)
	cmd.Env = append(os.Environ(), "PYTHONPATH=pyshim")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v\n%s", err, out)
	}
	buf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".data.part"); !os.IsNotExist(err) {
		t.Errorf("side file left behind (%v)", err)
	}
	r := &reader{b: buf}
	if string(r.next(4)) != "GGUF" || r.u32() != 3 {
		t.Fatal("no GGUF v3 magic")
	}
	nTensors, nKV := r.u64(), r.u64()
	if nTensors != 2 || nKV != 5 {
		t.Fatalf("%d tensors, %d keys; want 2 and 5 (general.architecture first)", nTensors, nKV)
	}
	want := []string{"general.architecture=locateanything", "a.u32=7", "a.f32=0.5", "a.ints=[2 2]", "a.strs=[x yz]"}
	for i := range int(nKV) {
		key := r.str()
		var got string
		switch typ := r.u32(); typ {
		case 4:
			got = strconv.Itoa(int(r.u32()))
		case 6:
			got = strconv.FormatFloat(float64(math.Float32frombits(r.u32())), 'g', -1, 32)
		case 8:
			got = r.str()
		case 9:
			et, n := r.u32(), r.u64()
			var els []string
			for range n {
				switch et {
				case 5:
					els = append(els, strconv.Itoa(int(int32(r.u32()))))
				case 8:
					els = append(els, r.str())
				default:
					t.Fatalf("%s: element type %d", key, et)
				}
			}
			got = "[" + strings.Join(els, " ") + "]"
		default:
			t.Fatalf("%s: value type %d", key, typ)
		}
		if key+"="+got != want[i] {
			t.Errorf("key %d: %s=%s, want %s", i, key, got, want[i])
		}
	}
	type info struct {
		name   string
		dims   []uint64
		offset uint64
	}
	var infos []info
	for range nTensors {
		in := info{name: r.str()}
		nd := r.u32()
		for range nd {
			in.dims = append(in.dims, r.u64())
		}
		if typ := r.u32(); typ != 0 {
			t.Errorf("%s: ggml type %d, want 0 (f32)", in.name, typ)
		}
		in.offset = r.u64()
		infos = append(infos, in)
	}
	data := (r.pos + 31) / 32 * 32
	if infos[0].name != "t.matrix" || !slices.Equal(infos[0].dims, []uint64{3, 2}) || infos[0].offset != 0 ||
		infos[1].name != "t.vector" || !slices.Equal(infos[1].dims, []uint64{5}) || infos[1].offset != 32 {
		t.Fatalf("tensor infos %+v: want t.matrix [3 2] at 0 (innermost first), t.vector [5] at 32", infos)
	}
	if len(buf) != data+64 {
		t.Errorf("file is %d bytes, want data start %d + two 32-byte padded tensors", len(buf), data)
	}
	f32 := func(off, i int) float32 {
		return math.Float32frombits(binary.LittleEndian.Uint32(buf[data+off+4*i:]))
	}
	for i := range 6 {
		if f32(0, i) != float32(i) {
			t.Errorf("t.matrix[%d] = %v", i, f32(0, i))
		}
	}
	if f32(32, 4) != -1.5 {
		t.Errorf("t.vector[4] = %v", f32(32, 4))
	}

	// gguf_parts.py: split in two (one tensor each, every key in both) and joined back,
	// the file is the same bytes.
	prefix := filepath.Join(filepath.Dir(path), "part")
	joined := filepath.Join(filepath.Dir(path), "joined.gguf")
	for _, args := range [][]string{{"split", path, prefix, "2"}, {"join", joined, prefix + ".1.gguf", prefix + ".2.gguf"}} {
		if out, err := exec.Command(py, append([]string{"gguf_parts.py"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("gguf_parts.py %v: %v\n%s", args, err, out)
		}
	}
	part, err := os.ReadFile(prefix + ".2.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(part, []byte("general.architecture")) || bytes.Contains(part, []byte("t.matrix")) ||
		!bytes.Contains(part, []byte("t.vector")) {
		t.Error("part 2 should hold every key and only t.vector")
	}
	if back, err := os.ReadFile(joined); err != nil || !bytes.Equal(back, buf) {
		t.Errorf("split and joined: %d bytes differ from the %d written (%v)", len(back), len(buf), err)
	}
}

// TestSafetensorsShim reads a bf16 tensor of the tiny checkpoint through the stand-in and
// compares it with engine/checkpoint's view of the same bytes, widened here.
func TestSafetensorsShim(t *testing.T) {
	py := python(t, "numpy")
	dir := "../../testdata/checkpoints/tiny-bf16"
	m, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const name = "language_model.model.layers.0.mlp.down_proj.weight"
	want, ok := m.Tensor(name)
	if !ok || want.DType != checkpoint.BF16 {
		t.Fatalf("%s: not a bf16 tensor of %s", name, dir)
	}
	out := filepath.Join(t.TempDir(), "t.f32")
	code := `
import sys, json, os, safetensors
d, name, out = sys.argv[1:]
shard = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"][name]
with safetensors.safe_open(os.path.join(d, shard), framework="pt") as f:
    assert name in f.keys()
    t = f.get_tensor(name).float().numpy()
    print(list(t.shape))
    t.tofile(out)
`
	cmd := exec.Command(py, "-c", code, dir, name, out)
	cmd.Env = append(os.Environ(), "PYTHONPATH=pyshim")
	shape, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reader: %v\n%s", err, shape)
	}
	if got, w := strings.TrimSpace(string(shape)), pyList(want.Shape); got != w {
		t.Errorf("shape %s, want %s", got, w)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*len(want.Data) {
		t.Fatalf("%d float32 bytes for %d bf16 bytes", len(got), len(want.Data))
	}
	for i := 0; i < len(want.Data); i += 2 {
		w := uint32(binary.LittleEndian.Uint16(want.Data[i:])) << 16
		if g := binary.LittleEndian.Uint32(got[2*i:]); g != w {
			t.Fatalf("element %d: %08x, want %08x (bf16 widened)", i/2, g, w)
		}
	}
}

// pyList formats a shape as Python prints a list of ints.
func pyList(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// reader reads the little-endian fields of a GGUF file.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) next(n int) []byte { r.pos += n; return r.b[r.pos-n : r.pos] }
func (r *reader) u32() uint32       { return binary.LittleEndian.Uint32(r.next(4)) }
func (r *reader) u64() uint64       { return binary.LittleEndian.Uint64(r.next(8)) }
func (r *reader) str() string       { return string(r.next(int(r.u64()))) }

// TestMachineColumns: compare.sh names the CPU (model and the instruction sets the engines
// choose among) and each of our rows' kernel sets from its `worker bench` log, and the
// summary prints the CPU above the table and the kernel set of every configuration.
func TestMachineColumns(t *testing.T) {
	cpuLine := sourced(t, "cpu_model")
	if cpuLine == "" || !strings.Contains(cpuLine, "(") {
		t.Errorf("cpu_model = %q, want the model name and its instruction sets", cpuLine)
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil && !strings.Contains(string(data), "amx_tile") &&
		!strings.Contains(cpuLine, "no AMX") {
		t.Errorf("cpu_model = %q on a CPU without AMX, want it said", cpuLine)
	}
	log := filepath.Join(t.TempDir(), "bench.log")
	text := "checkpoint  x\nbackend     cpu, decode kernels avx512, 2 threads, 1 runs (median), resident weights true, decoder weights q8, prefill/vision products avx512bf16, KV cache 512 positions per sequence\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := sourced(t, "kernels_of "+log), "decode avx512, prefill/vision avx512bf16"; got != want {
		t.Errorf("kernels_of = %q, want %q", got, want)
	}

	dir := t.TempDir()
	tsv, machine := filepath.Join(dir, "results.tsv"), filepath.Join(dir, "machine.tsv")
	rows := "round\tconfig\tvision_ms\tprefill_ms\tdecode_ms\ttokens\tthreads\tpeak_rss_kb\twall_s\n" +
		"1\tours\t20000\t20000\t20000\t64\t2\t12000000\t70\n" +
		"1\tport\t40000\t40000\t40000\t64\t2\t6000000\t130\n"
	mach := "round\tconfig\tcpu\tkernels\n" +
		"1\tours\tAMD EPYC 9B45 (avx512_bf16 no AMX)\tdecode avx512, prefill/vision avx512bf16\n" +
		"1\tport\tAMD EPYC 9B45 (avx512_bf16 no AMX)\tggml default build (GGML_NATIVE)\n"
	for f, s := range map[string]string{tsv: rows, machine: mach} {
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("python3", "summarize.py", "--reference", "ours", tsv).CombinedOutput()
	if err != nil {
		t.Fatalf("summarize.py: %v\n%s", err, out)
	}
	for _, want := range []string{
		"CPU: AMD EPYC 9B45 (avx512_bf16 no AMX)\n",
		"| 1.00 | 1.00 | 1.00 | 1.00 | decode avx512, prefill/vision avx512bf16 |",
		"| 2.00 | 2.00 | 2.00 | 2.00 | ggml default build (GGML_NATIVE) |",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
