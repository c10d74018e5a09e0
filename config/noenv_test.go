package config_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/locateanything/detect/config"
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

// TestEachVariableIsDeclaredOnce: a variable's envconfig tag (with its default and its
// meaning) is written on one line of the repository, in package config or in the library
// whose config type package config embeds; a second line would be a second copy of a
// default, and a tag outside the trees would be a variable that `worker config` cannot show
// and the unknown-variable check refuses.
func TestEachVariableIsDeclaredOnce(t *testing.T) {
	tag := regexp.MustCompile(`envconfig:"([^"]*)"`)
	known := map[string]bool{}
	for _, n := range config.Names(config.Worker{}, config.Submit{}) {
		known[n] = true
	}
	declared := map[string]string{}
	eachGoSource(t, func(rel, src string) {
		for i, line := range strings.Split(src, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, m := range tag.FindAllStringSubmatch(line, -1) {
				at := fmt.Sprintf("%s:%d", rel, i+1)
				switch name := m[1]; {
				case declared[name] != "":
					t.Errorf("%s declares %s again (first at %s)", at, name, declared[name])
				case !known[name]:
					t.Errorf("%s declares %s, which neither the worker's nor submit's configuration holds", at, name)
				default:
					declared[name] = at
				}
			}
		}
	})
	for n := range known {
		if declared[n] == "" {
			t.Errorf("%s: no declaration found", n)
		}
	}
}
