package config_test

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/locateanything/detect/config"
)

// complaint finds where code refuses a variable's value in the words users read: a message
// that starts with the variable ("LA_MAX_BATCH is 40, want ...") or a settings.Check
// helper given its name.
var complaint = regexp.MustCompile(`"((?:LA|OTEL)_[A-Z0-9_]+) (?:is|must) |\.(?:Positive|NotNegative|PositiveDuration|NotNegativeDuration|Finite|OneOf)\("((?:LA|OTEL)_[A-Z0-9_]+)"`)

// TestEachVariableIsValidatedInOnePackage: each variable's rules are checked by the one
// Validate of the type that declares it (or by package config, for a rule that ties
// sections together), so a second package refusing the same variable in its own words is a
// second copy of the rule that can drift from the first. A lower layer may still guard
// against a caller's slip, in its own terms, without naming the variable.
func TestEachVariableIsValidatedInOnePackage(t *testing.T) {
	known := map[string]bool{}
	for _, n := range config.Names(config.Worker{}, config.Submit{}) {
		known[n] = true
	}
	where := map[string][]string{}
	eachGoSource(t, func(rel, src string) {
		pkg := filepath.Dir(rel)
		for _, m := range complaint.FindAllStringSubmatch(src, -1) {
			name := m[1] + m[2]
			if known[name] && !slices.Contains(where[name], pkg) {
				where[name] = append(where[name], pkg)
			}
		}
	})
	if len(where) < 20 {
		t.Fatalf("found the complaints of %d variables only: the pattern no longer matches how they are written", len(where))
	}
	for name, pkgs := range where {
		if len(pkgs) > 1 {
			t.Errorf("%s is validated in %v: keep its rule in the one Validate of the type that declares it", name, pkgs)
		}
	}
}
