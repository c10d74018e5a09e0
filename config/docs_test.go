package config_test

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/jobs"
)

var update = flag.Bool("update", false, "rewrite the generated variable table of docs/worker.md")

const (
	docPath    = "../docs/worker.md"
	beginTable = "<!-- BEGIN GENERATED: go test ./config -run WorkerDoc -update -->\n"
	endTable   = "<!-- END GENERATED -->\n"
)

// variableTable is docs/worker.md's table of every variable of the worker, written from
// the tags the variables are declared with: name, default and meaning, by section.
func variableTable() string {
	var b strings.Builder
	section := ""
	for _, s := range config.Settings(config.Worker{}, nil) {
		if s.Section != section {
			section = s.Section
			fmt.Fprintf(&b, "\n**%s**\n\n| variable | default | meaning |\n|---|---|---|\n", section)
		}
		def := "empty"
		if s.Default != "" {
			def = "`" + s.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s.Name, def, strings.ReplaceAll(s.Desc, "|", `\|`))
	}
	return b.String() + "\n"
}

// TestWorkerDocListsEveryVariable: docs/worker.md holds the table of every variable as the
// code declares it (go test ./config -run WorkerDoc -update rewrites it), so a knob added,
// removed or given another default or meaning cannot leave the documentation behind.
func TestWorkerDocListsEveryVariable(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	before, rest, ok := strings.Cut(text, beginTable)
	current, after, ok2 := strings.Cut(rest, endTable)
	if !ok || !ok2 {
		t.Fatalf("docs/worker.md lacks the generated table's markers %q and %q", beginTable, endTable)
	}
	want := variableTable()
	if current == want {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(before+beginTable+want+endTable+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/worker.md's variable table is not the configuration's; rerun with -update:\n%s", want)
}

// TestWorkerDocHandTablesFollowTheCode: the hand-written tables and lists of docs/worker.md's
// Configuration section, which say more than the generated table, name only variables the
// code declares (a `LA_HTTP_*` pattern names some), and where a row's default is a single
// value, or "empty", it is the declared default.
func TestWorkerDocHandTablesFollowTheCode(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Configuration\n")
	section, _, ok2 := strings.Cut(section, beginTable)
	if !ok || !ok2 {
		t.Fatal("docs/worker.md lacks its Configuration section or the generated table after it")
	}
	defaults := map[string]string{}
	for _, s := range config.Settings(config.Worker{}, nil) {
		defaults[s.Name] = s.Default
	}
	// Names in backticks that are no variable: the prefix itself and the JetStream names.
	notVariables := map[string]bool{"LA_": true, jobs.JobsStream: true, jobs.ResultsStream: true, jobs.DLQStream: true, jobs.StateBucket: true}
	known := func(name string) bool {
		if notVariables[name] {
			return true
		}
		if prefix, ok := strings.CutSuffix(name, "*"); ok {
			for n := range defaults {
				if strings.HasPrefix(n, prefix) {
					return true
				}
			}
			return false
		}
		_, ok := defaults[name]
		return ok
	}
	names := regexp.MustCompile("`((?:LA|TT|HF|OTEL)_[A-Z0-9_]*\\*?)`")
	for _, m := range names.FindAllStringSubmatch(section, -1) {
		if !known(m[1]) {
			t.Errorf("docs/worker.md's Configuration section names %s, which the worker does not declare", m[1])
		}
	}
	single := regexp.MustCompile("^`([^`]*)`$")
	rows, checked := 0, 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		rows++
		vars := names.FindAllStringSubmatch(cells[1], -1)
		def := strings.TrimSpace(cells[2])
		for _, v := range vars {
			want, declared := defaults[v[1]]
			if !declared {
				continue // reported above
			}
			switch m := single.FindStringSubmatch(def); {
			case def == "empty":
				checked++
				if want != "" {
					t.Errorf("docs/worker.md: %s defaults to empty, the code to %q", v[1], want)
				}
			case m != nil && want != "":
				checked++
				if m[1] != want {
					t.Errorf("docs/worker.md: %s defaults to %q, the code to %q", v[1], m[1], want)
				}
			}
		}
	}
	if rows < 30 || checked < 25 {
		t.Errorf("read %d table rows and checked %d defaults: the tables' layout changed, so this test checks too little", rows, checked)
	}
}
