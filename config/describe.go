package config

import (
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/locateanything/detect/jobs/natsconn"
)

// Setting is one variable of a configuration tree as it stands after loading.
type Setting struct {
	Name    string // the variable, e.g. LA_GRACE
	Value   string // the effective value; "[redacted]" for a set secret
	Default string // the default from the tag; "" when none
	Desc    string // the one-line meaning from the tag
	Source  string // "environment" or "default"
	Secret  bool
	// Section is the struct the variable is declared in ("Engine", "NATS", ...; the tree's
	// own type for its top-level fields), for listings grouped the way the code groups them.
	Section string

	secret string // the secret tag: "url" redacts only the credentials written into a URL
}

// Shown is how a value of the variable may be printed: a secret redacted (for a URL, only
// the credentials written into it).
func (s Setting) Shown(value string) string {
	switch {
	case s.secret == "url":
		return natsconn.RedactURL(value)
	case s.Secret && value != "":
		return Redacted
	}
	return value
}

// Redacted stands in for a secret's value.
const Redacted = "[redacted]"

// Settings lists the variables of a configuration tree (a Worker or a Submit, or a pointer
// to one), in declaration order. environ is the process environment as os.Environ gives
// it: a variable set there is reported as coming from the environment.
func Settings(tree any, environ []string) []Setting {
	set := map[string]bool{}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	var out []Setting
	walk(reflect.Indirect(reflect.ValueOf(tree)), func(section string, f reflect.StructField, v reflect.Value) {
		s := Setting{
			Name:    f.Tag.Get("envconfig"),
			Value:   format(v),
			Default: f.Tag.Get("default"),
			Desc:    f.Tag.Get("desc"),
			Source:  "default",
			Secret:  f.Tag.Get("secret") != "",
			Section: section,
			secret:  f.Tag.Get("secret"),
		}
		switch {
		case set[s.Name]:
			s.Source = "environment"
		case !s.Secret && isText(v) && s.Value != s.Default:
			s.Source = "derived" // filled in from other settings (Finish)
		}
		s.Value = s.Shown(s.Value)
		out = append(out, s)
	})
	return out
}

// Names lists the variables of the given configuration trees.
func Names(trees ...any) []string {
	var names []string
	for _, t := range trees {
		walk(reflect.Indirect(reflect.ValueOf(t)), func(_ string, f reflect.StructField, _ reflect.Value) {
			names = append(names, f.Tag.Get("envconfig"))
		})
	}
	return names
}

// walk calls visit for every tagged field of the tree v with its section: the name of the
// tree's field the variable lies under (the embedded section, e.g. HTTP or Runner, however
// deep the library's own type nests it), or the tree's type name for its own fields.
func walk(v reflect.Value, visit func(section string, f reflect.StructField, v reflect.Value)) {
	walkSection(v, v.Type().Name(), true, visit)
}

func walkSection(v reflect.Value, section string, top bool, visit func(section string, f reflect.StructField, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Tag.Get("ignored") == "true" {
			continue
		}
		if f.Tag.Get("envconfig") != "" {
			visit(section, f, v.Field(i))
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			inner := section
			if top {
				inner = f.Name
			}
			walkSection(v.Field(i), inner, false, visit)
		}
	}
}

// isText reports whether v is a string or a list of strings: a value whose printed form
// is its tag's, so that one that differs from its default was changed after loading.
func isText(v reflect.Value) bool {
	k := v.Kind()
	return k == reflect.String || k == reflect.Slice && v.Type().Elem().Kind() == reflect.String
}

// format writes a value the way envconfig reads it back.
func format(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = format(v.Index(i))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}

// Print writes settings as a table: variable, value, source and meaning.
func Print(w io.Writer, settings []Setting) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tVALUE\tSOURCE\tMEANING")
	for _, s := range settings {
		value := s.Value
		if value == "" {
			value = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, value, s.Source, s.Desc)
	}
	return tw.Flush()
}

// Unknown returns an error naming every LA_ variable in environ that none of the known
// names matches, each with the closest known name when one is near.
func Unknown(environ []string, known []string) error {
	isKnown := map[string]bool{}
	for _, k := range known {
		isKnown[k] = true
	}
	var bad []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "LA_") || isKnown[k] {
			continue
		}
		msg := k + ": unknown"
		if near := closest(k, known); near != "" {
			msg += "; did you mean " + near + "?"
		}
		bad = append(bad, msg)
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%s (docs/worker.md lists every variable)", strings.Join(bad, ", "))
}

// closest is the known name at the smallest edit distance from name, if that distance is
// small next to the name's length; "" otherwise.
func closest(name string, known []string) string {
	best, bestDist := "", len(name)/3+1
	for _, k := range known {
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (with adjacent transpositions, the
// commonest typo) between a and b.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
