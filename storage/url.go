package storage

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Schemes a Router serves.
const (
	SchemeS3   = "s3"
	SchemeFile = "file"
)

// Location is a parsed storage URL.
//
// URLs are written as the AWS CLI writes them, not percent-encoded: everything after
// "s3://bucket/" is the key byte for byte, and everything after "file://" is the path, so
// "s3://b/a b?.jpg" names the key "a b?.jpg".
type Location struct {
	Scheme string // SchemeS3 or SchemeFile
	Bucket string // s3: the bucket
	Key    string // s3: the object key, or a key prefix (possibly empty) when listing
	Path   string // file: the absolute, clean path; a trailing "/" only in a listing prefix
}

// String is the URL the location was parsed from, in canonical form.
func (l Location) String() string {
	if l.Scheme == SchemeFile {
		return "file://" + l.Path
	}
	return "s3://" + l.Bucket + "/" + l.Key
}

// Length limits: S3's on an object key, and Linux's on a path (PATH_MAX, less the NUL) and
// on one name in it (NAME_MAX). A longer path could never be opened, so it is a bad URL
// rather than a failure to retry.
const (
	maxKeyBytes  = 1024
	maxPathBytes = 4095
	maxNameBytes = 255
)

// ParseURL parses the URL of one object: s3://bucket/key or file:///absolute/path.
func ParseURL(raw string) (Location, error) {
	return parse(raw, false)
}

// ParsePrefix parses a listing prefix: like ParseURL, but the key may be empty
// (s3://bucket/ or s3://bucket lists the whole bucket) and a path may end in "/".
func ParsePrefix(raw string) (Location, error) {
	return parse(raw, true)
}

func parse(raw string, prefix bool) (Location, error) {
	bad := func(part, format string, args ...any) (Location, error) {
		return Location{}, &URLError{URL: raw, Part: part, Reason: fmt.Sprintf(format, args...)}
	}
	if raw == "" {
		return bad("url", "empty")
	}
	if !utf8.ValidString(raw) {
		return bad("url", "not valid UTF-8")
	}
	if strings.ContainsRune(raw, 0) {
		return bad("url", "contains a NUL byte")
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return bad("scheme", "missing (want s3://bucket/key or file:///absolute/path)")
	}
	switch strings.ToLower(scheme) {
	case SchemeS3:
		return parseS3(raw, rest, prefix, bad)
	case SchemeFile:
		return parseFile(rest, prefix, bad)
	default:
		return bad("scheme", "%q is not supported (want s3 or file)", scheme)
	}
}

func parseS3(raw, rest string, prefix bool, bad func(string, string, ...any) (Location, error)) (Location, error) {
	bucket, key, hasSlash := strings.Cut(rest, "/")
	if bucket == "" {
		return bad("bucket", "empty")
	}
	if reason := checkBucketName(bucket); reason != "" {
		return bad("bucket", "%q %s", bucket, reason)
	}
	if len(key) > maxKeyBytes {
		return bad("key", "%d bytes, over S3's limit of %d", len(key), maxKeyBytes)
	}
	if !prefix {
		if !hasSlash || key == "" {
			return bad("key", "empty (want s3://%s/some/key)", bucket)
		}
		if strings.HasSuffix(key, "/") {
			return bad("key", "%q ends in \"/\", which names a folder, not an object", key)
		}
		if strings.TrimSpace(key) == "" {
			return bad("key", "%q is only white space, which the S3 client refuses", key)
		}
	}
	return Location{Scheme: SchemeS3, Bucket: bucket, Key: key}, nil
}

// checkBucketName applies S3's bucket naming rules and returns why name breaks them, or "".
func checkBucketName(name string) string {
	if len(name) < 3 || len(name) > 63 {
		return "must be 3 to 63 characters long"
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Sprintf("has %q; only lowercase letters, digits, '.' and '-' are allowed", c)
		}
	}
	if !isAlnum(name[0]) || !isAlnum(name[len(name)-1]) {
		return "must begin and end with a letter or digit"
	}
	if strings.Contains(name, "..") {
		return "must not contain \"..\""
	}
	if strings.Contains(name, ".-") || strings.Contains(name, "-.") {
		return "must not contain \".-\" or \"-.\""
	}
	if looksLikeIPv4(name) {
		return "must not be formatted as an IP address"
	}
	return ""
}

// looksLikeIPv4 reports whether name is four dot-separated groups of digits (192.168.5.4).
func looksLikeIPv4(name string) bool {
	groups := strings.Split(name, ".")
	if len(groups) != 4 {
		return false
	}
	for _, g := range groups {
		if g == "" || len(g) > 3 || strings.Trim(g, "0123456789") != "" {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func parseFile(rest string, prefix bool, bad func(string, string, ...any) (Location, error)) (Location, error) {
	if !strings.HasPrefix(rest, "/") {
		host, _, _ := strings.Cut(rest, "/")
		return bad("path", "host %q is not supported; write file:///absolute/path (three slashes)", host)
	}
	p := rest
	body := p
	if prefix && len(p) > 1 {
		body = strings.TrimSuffix(p, "/")
	}
	for _, elem := range strings.Split(body, "/") {
		if elem == ".." {
			return bad("path", "%q contains \"..\"", p)
		}
	}
	if path.Clean(body) != body {
		return bad("path", "%q is not clean (no \"//\", \"/./\" or trailing \"/\"; clean form %q)", p, path.Clean(body))
	}
	if len(p) > maxPathBytes {
		return bad("path", "%d bytes long, over the limit of %d", len(p), maxPathBytes)
	}
	for _, elem := range strings.Split(body, "/") {
		if len(elem) > maxNameBytes {
			return bad("path", "has a %d-byte name, over the limit of %d", len(elem), maxNameBytes)
		}
	}
	if !prefix && p == "/" {
		return bad("path", "\"/\" is a folder, not a file")
	}
	return Location{Scheme: SchemeFile, Path: p}, nil
}
