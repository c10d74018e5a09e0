package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/locateanything/detect/internal/settings"
)

// Config selects and configures the backends. The settings are declared here (the tags:
// variable, default, meaning; package config reads them from the environment, and Validate
// is the one check of them). Empty Endpoint turns s3:// off; empty FileRoots and
// OutputRoots turn file:// off. MaxImageBytes is required.
type Config struct {
	// Endpoint is the S3 service's host[:port], e.g. "s3.amazonaws.com" or "minio:9000".
	// An "http://" or "https://" in front decides TLS and overrides Secure.
	Endpoint string `envconfig:"LA_S3_ENDPOINT" desc:"S3 service host[:port]; empty turns s3:// off"`
	// Region is the bucket region signed into requests.
	Region string `envconfig:"LA_S3_REGION" default:"us-east-1" desc:"bucket region signed into S3 requests"`
	// AccessKey and SecretKey are static credentials. Set both, or use CredentialsFile,
	// or neither for anonymous access to public buckets.
	AccessKey string `envconfig:"LA_S3_ACCESS_KEY" secret:"true" desc:"S3 access key (with LA_S3_SECRET_KEY; neither = anonymous)"`
	SecretKey string `envconfig:"LA_S3_SECRET_KEY" secret:"true" desc:"S3 secret key"`
	// CredentialsFile is read once at Open. Two forms are accepted: an AWS shared
	// credentials file (its [default] profile: aws_access_key_id, aws_secret_access_key,
	// optional aws_session_token), or a plain file whose first line is the access key and
	// second line the secret key (the form a Kubernetes secret mounts easily).
	CredentialsFile string `envconfig:"LA_S3_CREDENTIALS_FILE" desc:"S3 credentials: an AWS credentials file, or access key and secret key on two lines"`
	// Secure turns TLS on for an endpoint given without a scheme.
	Secure bool `envconfig:"LA_S3_SECURE" default:"true" desc:"TLS to an LA_S3_ENDPOINT given without http:// or https://"`
	// PathStyle is "auto" (minio-go decides: virtual-host for AWS, path-style elsewhere),
	// "true" (always https://endpoint/bucket/key) or "false" (always
	// https://bucket.endpoint/key).
	PathStyle string `envconfig:"LA_S3_PATH_STYLE" default:"auto" desc:"S3 addressing: auto, true (endpoint/bucket/key) or false (bucket.endpoint/key)"`
	// CAFile is a PEM bundle trusted in addition to the system roots (a private CA).
	CAFile string `envconfig:"LA_S3_CA_FILE" desc:"PEM bundle trusted for S3 beside the system roots"`
	// FileRoots are the directories file:// may read below, and write below too unless
	// OutputRoots is set. Each must exist.
	FileRoots []string `envconfig:"LA_FILE_ROOTS" desc:"directories file:// may read (and write, without LA_OUTPUT_ROOTS)"`
	// OutputRoots, when set, are the only directories file:// may write below (results,
	// overlays); reads stay below FileRoots. A directory may be in both. Each must exist.
	OutputRoots []string `envconfig:"LA_OUTPUT_ROOTS" desc:"the only directories file:// may write, when set"`
	// Hidden are folders file:// never reads, writes or lists, whatever the roots, even a
	// root that names one or lies below one: the worker hides its JetStream store
	// (LA_DATA_DIR/jetstream) this way. A folder need not exist yet.
	Hidden []string `ignored:"true"`
	// MaxImageBytes is the limit Get applies when called with maxBytes <= 0.
	MaxImageBytes int64 `envconfig:"LA_MAX_IMAGE_BYTES" default:"33554432" desc:"largest image a job may name, in bytes"`
}

// Validate reports every setting that makes no sense, each naming its variable. Open
// checks it first.
func (c Config) Validate() error {
	var v settings.Check
	v.Positive("LA_MAX_IMAGE_BYTES", c.MaxImageBytes)
	if _, err := bucketLookup(c.PathStyle); err != nil {
		v.Join(err)
	}
	return v.Err()
}

const redacted = "[redacted]"

// String describes the configuration with credentials redacted, fit for logs.
func (c Config) String() string {
	return fmt.Sprintf("storage.Config{Endpoint:%q Region:%q AccessKey:%s SecretKey:%s CredentialsFile:%q "+
		"Secure:%t PathStyle:%q CAFile:%q FileRoots:%q OutputRoots:%q Hidden:%q MaxImageBytes:%d}",
		c.Endpoint, c.Region, redact(c.AccessKey), redact(c.SecretKey), c.CredentialsFile,
		c.Secure, c.PathStyle, c.CAFile, c.FileRoots, c.OutputRoots, c.Hidden, c.MaxImageBytes)
}

// GoString keeps %#v from printing the credentials.
func (c Config) GoString() string { return c.String() }

// LogValue makes slog print the configuration with credentials redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", c.Endpoint),
		slog.String("region", c.Region),
		slog.String("access_key", redact(c.AccessKey)),
		slog.String("secret_key", redact(c.SecretKey)),
		slog.String("credentials_file", c.CredentialsFile),
		slog.Bool("secure", c.Secure),
		slog.String("path_style", c.PathStyle),
		slog.String("ca_file", c.CAFile),
		slog.Any("file_roots", c.FileRoots),
		slog.Any("output_roots", c.OutputRoots),
		slog.Any("hidden", c.Hidden),
		slog.Int64("max_image_bytes", c.MaxImageBytes),
	)
}

// redact shows whether a secret is set without showing it.
func redact(s string) string {
	if s == "" {
		return `""`
	}
	return redacted
}

// staticCredentials are the keys the S3 client signs with; empty means anonymous.
type staticCredentials struct {
	accessKey, secretKey, sessionToken string
}

// credentials picks the configured credentials: the two variables or the file, never both.
func (c Config) credentials() (staticCredentials, error) {
	inline := c.AccessKey != "" || c.SecretKey != ""
	switch {
	case inline && c.CredentialsFile != "":
		return staticCredentials{}, fmt.Errorf("set either LA_S3_ACCESS_KEY and LA_S3_SECRET_KEY or LA_S3_CREDENTIALS_FILE, not both")
	case inline && (c.AccessKey == "" || c.SecretKey == ""):
		return staticCredentials{}, fmt.Errorf("LA_S3_ACCESS_KEY and LA_S3_SECRET_KEY must be set together")
	case inline:
		return staticCredentials{accessKey: c.AccessKey, secretKey: c.SecretKey}, nil
	case c.CredentialsFile != "":
		return readCredentialsFile(c.CredentialsFile)
	default:
		return staticCredentials{}, nil
	}
}

// readCredentialsFile reads an AWS shared credentials file ([default] profile) or a
// two-line file (access key, then secret key). Error messages never quote the file's lines.
func readCredentialsFile(name string) (staticCredentials, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return staticCredentials{}, fmt.Errorf("LA_S3_CREDENTIALS_FILE: %w", err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		return staticCredentials{}, fmt.Errorf("LA_S3_CREDENTIALS_FILE %s: %w", name, err)
	}
	if len(lines) > 0 && strings.HasPrefix(lines[0], "[") {
		return parseAWSProfile(name, lines)
	}
	if len(lines) != 2 {
		return staticCredentials{}, fmt.Errorf("LA_S3_CREDENTIALS_FILE %s: want an AWS credentials file with a [default] profile, "+
			"or two lines (access key, secret key); found %d non-empty lines", name, len(lines))
	}
	return staticCredentials{accessKey: lines[0], secretKey: lines[1]}, nil
}

func parseAWSProfile(name string, lines []string) (staticCredentials, error) {
	var creds staticCredentials
	section := ""
	for _, line := range lines {
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		if section != "default" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "aws_access_key_id":
			creds.accessKey = strings.TrimSpace(v)
		case "aws_secret_access_key":
			creds.secretKey = strings.TrimSpace(v)
		case "aws_session_token":
			creds.sessionToken = strings.TrimSpace(v)
		}
	}
	if creds.accessKey == "" || creds.secretKey == "" {
		return staticCredentials{}, fmt.Errorf("LA_S3_CREDENTIALS_FILE %s: the [default] profile needs aws_access_key_id and aws_secret_access_key", name)
	}
	return creds, nil
}
