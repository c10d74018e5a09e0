package main

import (
	"bytes"
	"strings"
	"testing"
)

// tokenizerDir holds the reference Qwen2 tokenizer files with LocateAnything's added tokens.
const tokenizerDir = "../../engine/tokenizer/testdata"

func runTokenizeOutput(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runTokenize(args, &out)
	return out.String(), err
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

func TestTokenizeWeightsFromEnvironment(t *testing.T) {
	t.Setenv("LA_WEIGHTS_DIR", tokenizerDir)
	got, err := runTokenizeOutput(t, "person</c>car")
	if want := "[8987,522,66,29,6918]\n"; err != nil || got != want {
		t.Errorf("tokenize = %q, %v; want %q", got, err, want)
	}
}

func TestTokenizeErrors(t *testing.T) {
	t.Setenv("LA_WEIGHTS_DIR", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"car"}, "needs --weights"},
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
