package main

import (
	"bytes"
	"encoding/json"
	"github.com/locateanything/detect/internal/cli"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/tokenizer"
	"github.com/locateanything/detect/provision"
)

// tokenizerDir holds the reference Qwen2 tokenizer files with LocateAnything's added tokens.
const tokenizerDir = "../../engine/tokenizer/testdata"

func runTokenizeOutput(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := runTokenizeStreams(t, args...)
	return out, err
}

// runTokenizeStreams is runTokenize's stdout (the answer) and stderr (whose tokenizer).
func runTokenizeStreams(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = runTokenize(args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestTokenizeEncodes(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--weights", tokenizerDir, "Hello, my dog is cute"}, "[9707,11,847,5562,374,18838]\n"},
		{[]string{"--weights", tokenizerDir, "Hello,", "my", "dog", "is", "cute"}, "[9707,11,847,5562,374,18838]\n"},
		{[]string{"--weights", tokenizerDir, "<ref>car</ref><box>None</box><|im_end|>"},
			"[151672,6918,151673,151668,4064,151669,151645]\n"},
		{[]string{"--weights", tokenizerDir, ""}, "[]\n"},
		{[]string{"Hello,", "my", "dog", "--weights", tokenizerDir, "is", "cute"}, "[9707,11,847,5562,374,18838]\n"}, // flags after the text
	}
	for _, tt := range tests {
		got, err := runTokenizeOutput(t, tt.args...)
		if err != nil || got != tt.want {
			t.Errorf("tokenize %q = %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
}

func TestTokenizeDecodes(t *testing.T) {
	got, err := runTokenizeOutput(t, "--weights", tokenizerDir, "--decode", "[151672, 6918, 151673, 151668, 151959, 151677, 152677, 151677, 151669]")
	if want := "<ref>car</ref><box><282><0><1000><0></box>\n"; err != nil || got != want {
		t.Errorf("decode = %q, %v; want %q", got, err, want)
	}
}

// TestTokenizeWeightsFromEnvironment: without --weights the tokenizer is that of the
// checkpoint the worker would run, chosen by the worker's rules: LA_WEIGHTS_DIR, its alias
// LA_MODEL_PATH, and with neither (and an empty Hugging Face cache) the bundled model.
func TestTokenizeWeightsFromEnvironment(t *testing.T) {
	bundled, err := tokenizer.Load("../../" + provision.BundledModel) // a small vocabulary of its own
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := json.Marshal(bundled.Encode("person</c>car"))
	for _, c := range []struct{ env, value, want, said string }{
		{"LA_WEIGHTS_DIR", "../../testdata/checkpoints/tiny-bf16", "[8987,522,66,29,6918]\n",
			"worker tokenize: the tokenizer in ../../testdata/checkpoints/tiny-bf16 (tiny-bf16, LA_WEIGHTS_DIR "},
		{"LA_MODEL_PATH", "../../testdata/checkpoints/tiny-f32", "[8987,522,66,29,6918]\n",
			"worker tokenize: the tokenizer in ../../testdata/checkpoints/tiny-f32 (tiny-f32, "},
		{"HF_HUB_CACHE", t.TempDir(), string(ids) + "\n", "la-bundled"}, // nothing configured: the bundled model
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir()) // where the binary's bundled model is unpacked
			t.Setenv(c.env, c.value)
			got, said, err := runTokenizeStreams(t, "person</c>car")
			if err != nil || got != c.want {
				t.Errorf("tokenize = %q, %v; want %q", got, err, c.want)
			}
			if !strings.Contains(said, c.said) || strings.Count(said, "\n") != 1 {
				t.Errorf("stderr %q, want one line naming the tokenizer that answered (%q)", said, c.said)
			}
		})
	}
	_, said, err := runTokenizeStreams(t, "--weights", tokenizerDir, "car")
	if want := "worker tokenize: the tokenizer in " + tokenizerDir + " (--weights)\n"; err != nil || said != want {
		t.Errorf("--weights: stderr %q, %v; want %q", said, err, want)
	}
}

// TestTokenizeFollowsTheWorkersRules: a configured directory that is not a checkpoint is
// an error, as it is for the worker, not a fallback; a misspelt variable stops it.
func TestTokenizeFollowsTheWorkersRules(t *testing.T) {
	t.Setenv("LA_WEIGHTS_DIR", tokenizerDir) // tokenizer files but no config.json
	if _, err := runTokenizeOutput(t, "car"); err == nil || !strings.Contains(err.Error(), "LA_WEIGHTS_DIR") {
		t.Errorf("LA_WEIGHTS_DIR without config.json: %v, want an error naming LA_WEIGHTS_DIR", err)
	}
	t.Setenv("LA_WEIGHTS_DIR", "")
	t.Setenv("LA_WEIGHTS_DRI", tokenizerDir)
	if _, err := runTokenizeOutput(t, "--weights", tokenizerDir, "car"); !cli.IsUsage(err) ||
		!strings.Contains(err.Error(), "did you mean LA_WEIGHTS_DIR?") {
		t.Errorf("LA_WEIGHTS_DRI set: %v, want a usage error suggesting LA_WEIGHTS_DIR", err)
	}
}

func TestTokenizeErrors(t *testing.T) {
	t.Setenv("LA_WEIGHTS_DIR", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--weights", tokenizerDir}, "needs the text"},
		{[]string{"--weights", t.TempDir(), "car"}, "read vocabulary"},
		{[]string{"--weights", tokenizerDir, "--bogus", "car"}, "flag provided but not defined"},
		{[]string{"--weights", tokenizerDir, "--decode", "9707 11"}, "want a JSON array"},
		{[]string{"--weights", tokenizerDir, "--decode", "null"}, "got null"},
		{[]string{"--weights", tokenizerDir, "--decode", "[1.5]"}, "want a JSON array"},
		{[]string{"--weights", tokenizerDir, "--decode", "[9707, 152681]"}, "id 152681 (position 1) is not a token"},
		{[]string{"--weights", tokenizerDir, "--decode", "[-1]"}, "id -1"},
	}
	for _, tt := range tests {
		out, err := runTokenizeOutput(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("tokenize %q: error %v, want one containing %q", tt.args, err, tt.want)
		}
		if out != "" {
			t.Errorf("tokenize %q printed %q on failure", tt.args, out)
		}
	}
}
