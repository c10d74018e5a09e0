package settings

import (
	"fmt"
	"slices"
	"strings"
)

// Set is a closed set of values of one string type, in documentation order, the default
// first: the set's one list, with its one membership test, its one parse and its one
// rendering for messages. A value outside it is refused where it enters (a variable, a
// flag, a request field), and the code past that point takes the typed value.
type Set[T ~string] []T

// Has reports whether v is a member.
func (s Set[T]) Has(v T) bool { return slices.Contains(s, v) }

// Parse is v as a member, or an error that names the members.
func (s Set[T]) Parse(v string) (T, error) {
	if s.Has(T(v)) {
		return T(v), nil
	}
	return "", fmt.Errorf("%q is not one of %s", v, s.List())
}

// List names the members for messages and help: "a, b, c".
func (s Set[T]) List() string {
	names := make([]string, len(s))
	for i, v := range s {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}
