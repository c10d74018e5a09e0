// Package settings is what the libraries' configuration types share to validate
// themselves. Each library declares its settings once, as the fields of its config type:
// the `envconfig` tag names the variable, `default` is its default and `desc` its one-line
// meaning (package config embeds the types and reads them from the environment). The
// type's one Validate reports every value that makes no sense through a Check, each
// complaint naming its variable, so the worker can refuse them all at once.
package settings

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Check collects the complaints of one validation. The zero value is ready.
type Check struct {
	errs []error
}

// Add records one complaint.
func (c *Check) Add(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// Join records every complaint of err (a joined error is split into its parts); nil adds
// none.
func (c *Check) Join(err error) {
	c.errs = append(c.errs, Split(err)...)
}

// Err is every complaint joined (errors.Join), or nil when there is none.
func (c *Check) Err() error { return errors.Join(c.errs...) }

// Positive requires at least 1.
func (c *Check) Positive(name string, v int64) {
	if v < 1 {
		c.Add("%s is %d, want at least 1", name, v)
	}
}

// NotNegative requires 0 or more; what 0 means is the caller's to say in meaning0.
func (c *Check) NotNegative(name string, v int64, meaning0 string) {
	if v < 0 {
		c.Add("%s is %d, want 0 (%s) or more", name, v, meaning0)
	}
}

// PositiveDuration requires a duration above 0.
func (c *Check) PositiveDuration(name string, d time.Duration) {
	if d <= 0 {
		c.Add("%s is %s, want a positive duration", name, d)
	}
}

// NotNegativeDuration requires 0 or a positive duration; meaning0 says what 0 means.
func (c *Check) NotNegativeDuration(name string, d time.Duration, meaning0 string) {
	if d < 0 {
		c.Add("%s is %s, want 0 (%s) or a positive duration", name, d, meaning0)
	}
}

// Finite requires a finite number no smaller than lowest.
func (c *Check) Finite(name string, v, lowest float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < lowest {
		c.Add("%s is %v, want %v or more", name, v, lowest)
	}
}

// OneOf requires one of the allowed values.
func (c *Check) OneOf(name, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		c.Add("%s is %q, want one of %s", name, v, Set[string](allowed).List())
	}
}

// Split is the complaints of an error that joins several (errors.Join, recursively), or
// the error alone; nil has none.
func Split(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Split(e)...)
	}
	return out
}
