package config

import (
	"net"
	"net/url"
	"strings"

	"github.com/locateanything/detect/internal/settings"
	"github.com/locateanything/detect/submit"
)

// Submit is the submit CLI's configuration: the NATS and storage settings it shares with
// the worker, and its own (submit.Settings). cmd/submit fills it from the environment and
// calls Finish, as cmd/worker does with Worker.
type Submit struct {
	NATS
	Storage
	submit.Settings
}

// SubmitNATSURL is the NATS server submit connects to when LA_NATS_URL is empty: the
// embedded single-machine worker's, at LA_NATS_LISTEN's default.
const SubmitNATSURL = "nats://127.0.0.1:4222"

// Finish applies the single-machine defaults and validates the whole. With LA_NATS_URL
// empty submit talks to the embedded worker at SubmitNATSURL; against NATS on this machine
// only, and no storage configured, it reads results and overlays as local files wherever
// that worker wrote them.
func (s *Submit) Finish() error {
	if s.NATS.URL == "" {
		s.NATS.URL = SubmitNATSURL
	}
	if s.Storage.Endpoint == "" && len(s.Storage.FileRoots) == 0 && loopbackOnly(s.NATS.URL) {
		s.Storage.FileRoots = []string{"/"}
	}
	return s.Validate()
}

// Validate reports every setting that makes no sense, joined by "; ".
func (s Submit) Validate() error {
	var v settings.Check
	v.Join(s.NATS.Validate())
	v.Join(s.Storage.Validate())
	v.Join(s.Settings.Validate())
	return v.Err()
}

// loopbackOnly reports whether every server in a comma-separated NATS URL list is on this
// machine's loopback interface.
func loopbackOnly(urls string) bool {
	for _, u := range strings.Split(urls, ",") {
		parsed, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			return false
		}
		host := parsed.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}
