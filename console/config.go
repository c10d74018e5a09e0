package console

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/locateanything/detect/internal/settings"
)

// Config is the console's settings, declared once here (package config embeds it in the
// worker's settings and reads it from the environment). Validate is the one check of the
// values; the rule that ties the console to the HTTP address (no console off loopback
// without a token) is ExposureError's, which the worker's configuration applies.
type Config struct {
	Mode  string `envconfig:"LA_CONSOLE" default:"auto" desc:"the web console under /console/ on the /predict server: on, off, or auto (on when LA_HTTP_ADDR is loopback or LA_CONSOLE_TOKEN is set)"`
	Token string `envconfig:"LA_CONSOLE_TOKEN" secret:"true" desc:"token that signs a browser in for the console's actions (replay, cancel); required off loopback"`
}

// Modes of LA_CONSOLE.
const (
	ModeOn   = "on"
	ModeOff  = "off"
	ModeAuto = "auto"
)

// Served reports whether the console is served on an HTTP address that is (loopback) or
// is not on the loopback interface only: on always (ExposureError refuses the unsafe case
// first), off never, auto when the address is loopback or a token is set.
func (c Config) Served(loopback bool) bool {
	switch strings.ToLower(c.Mode) {
	case ModeOff:
		return false
	case ModeAuto, "":
		return loopback || c.Token != ""
	}
	return true
}

// Withheld is why auto keeps the console off on an address that is not loopback, for the
// log; "" when it does not.
func (c Config) Withheld(httpAddr string, loopback bool) string {
	if !strings.EqualFold(c.Mode, ModeAuto) || c.Served(loopback) {
		return ""
	}
	return fmt.Sprintf("LA_HTTP_ADDR=%s is not a loopback address and LA_CONSOLE_TOKEN is not set: "+
		"set LA_CONSOLE_TOKEN to serve the console (LA_CONSOLE=auto)", httpAddr)
}

// Validate reports every setting that makes no sense, each naming its variable; it never
// quotes the token.
func (c Config) Validate() error {
	var v settings.Check
	v.OneOf("LA_CONSOLE", strings.ToLower(c.Mode), ModeAuto, ModeOff, ModeOn)
	if c.Token != "" && (len(c.Token) < 16 || strings.TrimSpace(c.Token) != c.Token) {
		v.Add("LA_CONSOLE_TOKEN must be at least 16 characters without surrounding spaces (its value is not shown)")
	}
	return v.Err()
}

// ExposureError is the reason the worker may not start with the console on httpAddr, or
// nil: a console asked for (LA_CONSOLE=on) and reachable from the network (loopback false)
// must have a token, or anyone who reaches it could replay and cancel jobs.
func (c Config) ExposureError(httpAddr string, loopback bool) error {
	if !strings.EqualFold(c.Mode, ModeOn) || loopback || c.Token != "" {
		return nil
	}
	return fmt.Errorf("the web console (LA_CONSOLE=on) would be served on LA_HTTP_ADDR=%s, which is not a loopback address, "+
		"without LA_CONSOLE_TOKEN: set LA_CONSOLE_TOKEN to a secret of 16 characters or more, or LA_CONSOLE=off", httpAddr)
}

const redacted = "[redacted]"

// String describes the configuration with the token redacted, fit for logs.
func (c Config) String() string {
	tok := ""
	if c.Token != "" {
		tok = redacted
	}
	return fmt.Sprintf("console.Config{Mode:%q Token:%q}", c.Mode, tok)
}

// GoString keeps %#v from printing the token.
func (c Config) GoString() string { return c.String() }

// LogValue makes slog print the configuration with the token redacted.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }
