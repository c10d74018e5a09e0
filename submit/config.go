package submit

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/locateanything/detect/jobs/natsconn"
	"github.com/locateanything/detect/storage"
)

// Config is the CLI's configuration: the same LA_NATS_* and LA_S3_* / LA_FILE_ROOTS
// settings a worker reads, plus LA_SUBMIT_* for this tool. cmd/submit fills it from the
// environment (package config names the variables) and calls Finish.
type Config struct {
	NATS    natsconn.Config // LA_NATS_*, shared with the worker
	Storage storage.Config
	// UploadPrefix is where local images are uploaded (--upload overrides it).
	UploadPrefix string
}

// DefaultNATSURL is the embedded single-machine worker's address.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// Finish applies the single-machine defaults: the embedded worker's NATS address, and,
// against NATS on this machine only, local results wherever that worker wrote them.
func (c *Config) Finish() {
	if c.NATS.URL == "" {
		c.NATS.URL = DefaultNATSURL
	}
	if c.Storage.Endpoint == "" && len(c.Storage.FileRoots) == 0 && loopbackOnly(c.NATS.URL) {
		// Against the embedded single-machine worker results and overlays are local files,
		// written where that worker may write: read them wherever they are.
		c.Storage.FileRoots = []string{"/"}
	}
}

// connectNATS connects with the shared LA_NATS_* settings.
func (c Config) connectNATS() (*nats.Conn, error) {
	nc, err := c.NATS.Connect("", "la-submit", nil)
	if err != nil {
		return nil, fmt.Errorf("%w (is a worker or NATS server running? set LA_NATS_URL)", err)
	}
	return nc, nil
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
