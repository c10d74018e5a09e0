// Package cli holds the command-line conventions the worker and submit share: --help that
// lists every flag with the environment variable behind it and its default, flags accepted
// after the arguments as well as before them, and the spelling of --help and --version.
//
// Variables and their defaults are not written here or in the commands: a Help takes them
// from package config (config.Settings), the one place they are declared.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/locateanything/detect/config"
)

// IsHelp reports whether arg asks for help: -h, -help or --help.
func IsHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// IsVersion reports whether arg asks for the version: -version or --version.
func IsVersion(arg string) bool { return arg == "-version" || arg == "--version" }

// AsksHelp reports whether an argument before a "--" asks for help, wherever it stands.
func AsksHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if IsHelp(a) {
			return true
		}
	}
	return false
}

// Parse parses args with fs, taking flags wherever they stand ("submit DIR --out X" is
// "submit --out X DIR", as GNU tools read it), and returns the other arguments in order.
// "--" ends the flags: everything after it is an argument. -h and --help anywhere return
// flag.ErrHelp. fs should be flag.ContinueOnError with its output discarded: the caller
// prints errors and help.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		// The flag package stops at the first argument that is not a flag, or after "--",
		// which it consumes: then everything left is arguments.
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" && !takesValue(fs, args, used-1) {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// takesValue reports whether args[i] is the value of the flag before it (--query -- is a
// query of "--", not the end of the flags).
func takesValue(fs *flag.FlagSet, args []string, i int) bool {
	if i == 0 {
		return false
	}
	prev := args[i-1]
	if !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimLeft(prev, "-"))
	if f == nil {
		return false
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return false
	}
	return true
}

// ErrHelp is flag.ErrHelp: returned (wrapped or not) by a command that printed its help.
var ErrHelp = flag.ErrHelp

// IsHelpErr reports whether err says help was asked for.
func IsHelpErr(err error) bool { return errors.Is(err, flag.ErrHelp) }

// Help is what a command's --help prints.
type Help struct {
	// Usage are the synopsis lines without "usage: ", e.g. "submit status [flags] [ID]".
	Usage []string
	// Summary says what the command does, a few lines printed as given.
	Summary string
	// Flags are the command's flags, exactly the set it parses; nil when it has none.
	Flags *flag.FlagSet
	// FlagEnv maps a flag to the variable whose value is its default.
	FlagEnv map[string]string
	// Env are the variables the command reads (config.Settings of its configuration
	// tree): names, defaults, sections, secrets. Every variable of FlagEnv is among them.
	Env []config.Setting
	// Environ is the process environment (os.Environ): a variable set there is shown with
	// its value, a secret as set but redacted.
	Environ []string
	// EnvDefaults are defaults the program applies to a variable that its tag does not
	// state (submit's LA_NATS_URL: the local worker's address).
	EnvDefaults map[string]string
	// BySection lists Env under the configuration's section names.
	BySection bool
	// Footer closes the help: where to read more.
	Footer string
}

// width is where descriptions wrap.
const width = 100

// Write prints the help: usage, summary, every flag with its default and variable, then
// every variable with its default and whether the environment sets it.
func (h Help) Write(w io.Writer) error {
	var b strings.Builder
	for i, u := range h.Usage {
		if i == 0 {
			b.WriteString("usage: " + u + "\n")
		} else {
			b.WriteString("       " + u + "\n")
		}
	}
	if h.Summary != "" {
		b.WriteString("\n" + strings.TrimRight(h.Summary, "\n") + "\n")
	}
	env := map[string]config.Setting{}
	for _, s := range h.Env {
		env[s.Name] = s
	}
	set := map[string]string{}
	for _, kv := range h.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set[k] = v
		}
	}
	var rows [][2]string
	if h.Flags != nil {
		h.Flags.VisitAll(func(f *flag.Flag) {
			rows = append(rows, h.flagRow(f, env))
		})
	}
	rows = append(rows, [2]string{"-h, --help", "print this help and exit"})
	b.WriteString("\nflags (before or after the arguments):\n")
	writeRows(&b, rows, leftWidth(rows))
	if len(h.Env) > 0 {
		b.WriteString("\nenvironment (meaning, default; current value when set):\n")
		section := ""
		var vars [][2]string
		left := 0
		for _, s := range h.Env {
			left = max(left, min(len(s.Name), 28))
		}
		flush := func() {
			writeRows(&b, vars, left)
			vars = nil
		}
		for _, s := range h.Env {
			if h.BySection && s.Section != section {
				flush()
				section = s.Section
				b.WriteString(" " + section + ":\n")
			}
			vars = append(vars, [2]string{s.Name, h.describeVar(s, set)})
		}
		flush()
	}
	if h.Footer != "" {
		b.WriteString("\n" + strings.TrimRight(h.Footer, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// flagRow is a flag's two columns: "--name VALUE" and its description with its variable
// and default.
func (h Help) flagRow(f *flag.Flag, env map[string]config.Setting) [2]string {
	name, usage := flag.UnquoteUsage(f)
	left := "--" + f.Name
	if name != "" {
		left += " " + name
	}
	def := f.DefValue
	if isZero(f) {
		def = ""
	}
	if v, ok := h.FlagEnv[f.Name]; ok {
		if def == "" {
			def = h.varDefault(env[v])
		}
		if def == "" {
			def = "none"
		}
		return [2]string{left, fmt.Sprintf("%s (env %s; default %s)", usage, v, def)}
	}
	if def != "" {
		usage += " (default " + def + ")"
	}
	return [2]string{left, usage}
}

// varDefault is a variable's default: the program's own, else its tag's.
func (h Help) varDefault(s config.Setting) string {
	if d, ok := h.EnvDefaults[s.Name]; ok {
		return d
	}
	return s.Default
}

// describeVar is a variable's second column: its meaning, its default and, when the
// environment sets it, its value (never a secret's).
func (h Help) describeVar(s config.Setting, set map[string]string) string {
	var parts []string
	if s.Desc != "" {
		parts = append(parts, s.Desc)
	}
	if d := h.varDefault(s); d != "" {
		parts = append(parts, "(default "+d+")")
	}
	if v, ok := set[s.Name]; ok {
		parts = append(parts, fmt.Sprintf("[set: %q]", s.Shown(v)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// isZero reports whether a flag's default is its type's zero value (not worth printing),
// the way the flag package decides it.
func isZero(f *flag.Flag) bool {
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	zv, ok := z.Interface().(flag.Value)
	return f.DefValue == "" || (ok && f.DefValue == zv.String())
}

// leftWidth is the first column's width for rows: the longest, up to 28 characters.
func leftWidth(rows [][2]string) int {
	left := 0
	for _, r := range rows {
		left = max(left, len(r[0]))
	}
	return min(left, 28)
}

// writeRows writes two aligned columns, the first left characters wide and the second
// wrapped at width; a first column too long for it gets a line of its own.
func writeRows(b *strings.Builder, rows [][2]string, left int) {
	indent := strings.Repeat(" ", 2+left+2)
	for _, r := range rows {
		lines := wrap(r[1], width-len(indent))
		if len(r[0]) > left {
			fmt.Fprintf(b, "  %s\n", r[0])
		} else {
			fmt.Fprintf(b, "  %-*s  %s\n", left, r[0], lines[0])
			lines = lines[1:]
		}
		for _, l := range lines {
			fmt.Fprintf(b, "%s%s\n", indent, l)
		}
	}
}

// wrap breaks s into lines of at most n characters at spaces (a longer word stays whole).
func wrap(s string, n int) []string {
	words := strings.Fields(s)
	if len(words) == 0 {
		return []string{""}
	}
	var lines []string
	line := words[0]
	for _, w := range words[1:] {
		if len(line)+1+len(w) > n {
			lines = append(lines, line)
			line = w
			continue
		}
		line += " " + w
	}
	return append(lines, line)
}

// Overview lists a program's commands, one line each in name order, for its --help and
// after an unknown command: summaries maps each command's name to its one-line summary.
func Overview(program string, summaries map[string]string) string {
	names := make([]string, 0, len(summaries))
	for n := range summaries {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "commands (%s COMMAND --help for each one's flags):\n", program)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-11s %s\n", n, summaries[n])
	}
	b.WriteString("  --version   print the version, commit and Go version\n")
	return b.String()
}
