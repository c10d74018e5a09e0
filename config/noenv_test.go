package config_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// envReads are the ways code reads the process environment, per language.
var envReads = map[string]*regexp.Regexp{
	".go": regexp.MustCompile(`\bos\.(Getenv|LookupEnv|Environ)\(|\benvconfig\.Process\(|\bsyscall\.Getenv\(`),
	".c":  regexp.MustCompile(`\bgetenv\(`),
	".py": regexp.MustCompile(`\bos\.getenv\(|\bos\.environ\.get\(|\bos\.environ\[[^\]]+\]\s*[^=\s]|\benviron\.get\(`),
}

// TestOnlyCommandsReadTheEnvironment: the settings are read once, by the programs in cmd/
// (package config states them); every library takes its part as a struct. Test files and
// the test-support packages (names ending in "test") may set up environments of their own,
// and tools/, examples/ (a producer in Python, which honours NATS_URL like the nats CLI) and
// the uvicorn launcher are separate programs.
func TestOnlyCommandsReadTheEnvironment(t *testing.T) {
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".":
			case rel == "cmd", rel == "tools", rel == "examples", rel == filepath.Join("launcher", "la_launcher"), strings.HasPrefix(d.Name(), "."), d.Name() == "testdata",
				strings.HasSuffix(d.Name(), "test"):
				return filepath.SkipDir
			}
			return nil
		}
		re := envReads[filepath.Ext(path)]
		if re == nil || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(d.Name(), "test_") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if code := strings.TrimSpace(line); strings.HasPrefix(code, "//") || strings.HasPrefix(code, "#") ||
				strings.HasPrefix(code, "*") || strings.HasPrefix(code, "/*") {
				continue // a comment may name what it does not do
			}
			if re.MatchString(line) {
				t.Errorf("%s:%d reads the environment: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDefaultsLiveOnlyInConfig: an envconfig default tag outside package config would be a
// second copy of a default (or a first one that `worker config` cannot show).
func TestDefaultsLiveOnlyInConfig(t *testing.T) {
	tag := regexp.MustCompile("envconfig:\"|\\bdefault:\"")
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			if rel == "config" || (rel != "." && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if tag.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d states a variable or default outside package config: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
