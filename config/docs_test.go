package config_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/locateanything/detect/config"
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
