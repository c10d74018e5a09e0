package storage

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3Store serves s3:// URLs through minio-go, which also does the retrying.
type s3Store struct {
	client *minio.Client
}

// newS3Store builds the client from cfg. It makes no request, so a service that is down
// at start-up shows up as errors from the first operations, not here.
func newS3Store(cfg Config) (*s3Store, error) {
	endpoint, secure, err := splitEndpoint(cfg.Endpoint, cfg.Secure)
	if err != nil {
		return nil, err
	}
	lookup, err := bucketLookup(cfg.PathStyle)
	if err != nil {
		return nil, err
	}
	creds, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	transport, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("S3 transport: %w", err)
	}
	if cfg.CAFile != "" {
		if !secure {
			return nil, fmt.Errorf("LA_S3_CA_FILE is set but TLS is off (LA_S3_SECURE=false or an http:// endpoint)")
		}
		pool, err := certPool(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig.RootCAs = pool
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(creds.accessKey, creds.secretKey, creds.sessionToken),
		Secure:       secure,
		Transport:    transport,
		Region:       cfg.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 client for %s: %w", endpoint, err)
	}
	return &s3Store{client: client}, nil
}

// splitEndpoint takes an optional http:// or https:// off the endpoint; the scheme, when
// present, decides TLS.
func splitEndpoint(endpoint string, secure bool) (string, bool, error) {
	switch {
	case strings.HasPrefix(endpoint, "https://"):
		endpoint, secure = strings.TrimPrefix(endpoint, "https://"), true
	case strings.HasPrefix(endpoint, "http://"):
		endpoint, secure = strings.TrimPrefix(endpoint, "http://"), false
	case strings.Contains(endpoint, "://"):
		return "", false, fmt.Errorf("LA_S3_ENDPOINT %q: only http:// or https:// may precede host[:port]", endpoint)
	}
	endpoint = strings.TrimSuffix(endpoint, "/")
	if endpoint == "" || strings.Contains(endpoint, "/") {
		return "", false, fmt.Errorf("LA_S3_ENDPOINT %q: want host[:port], without a path", endpoint)
	}
	return endpoint, secure, nil
}

func bucketLookup(pathStyle string) (minio.BucketLookupType, error) {
	switch strings.ToLower(pathStyle) {
	case "", "auto":
		return minio.BucketLookupAuto, nil
	case "true", "1", "path":
		return minio.BucketLookupPath, nil
	case "false", "0", "virtual", "dns":
		return minio.BucketLookupDNS, nil
	default:
		return 0, fmt.Errorf("LA_S3_PATH_STYLE %q: want auto, true (path-style) or false (virtual-host)", pathStyle)
	}
}

// certPool is the system roots plus the PEM certificates in file.
func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("LA_S3_CA_FILE: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // no system roots on this machine: trust the file alone
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("LA_S3_CA_FILE %s: no PEM certificate found", file)
	}
	return pool, nil
}

func (s *s3Store) stat(ctx context.Context, loc Location) (Object, error) {
	info, err := s.client.StatObject(ctx, loc.Bucket, loc.Key, minio.StatObjectOptions{})
	if err != nil {
		return Object{}, classifyS3(err)
	}
	return Object{URL: loc.String(), Size: info.Size, ContentType: info.ContentType}, nil
}

// get checks the size with a HEAD first, so an oversized object is refused before any of
// it is transferred, then reads at most maxBytes+1 bytes so an object that grew in between
// (or a server that misreports its size) is refused too.
func (s *s3Store) get(ctx context.Context, loc Location, maxBytes int64) ([]byte, error) {
	obj, err := s.stat(ctx, loc)
	if err != nil {
		return nil, err
	}
	if obj.Size > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, obj.Size, maxBytes)
	}
	body, err := s.client.GetObject(ctx, loc.Bucket, loc.Key, minio.GetObjectOptions{})
	if err != nil {
		return nil, classifyS3(err)
	}
	defer body.Close()
	data, err := readLimited(body, maxBytes)
	if err != nil && !errors.Is(err, ErrTooLarge) {
		return nil, classifyS3(err)
	}
	return data, err
}

func (s *s3Store) put(ctx context.Context, loc Location, data []byte, contentType string) error {
	_, err := s.client.PutObject(ctx, loc.Bucket, loc.Key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType})
	if err != nil {
		return classifyS3(err)
	}
	return nil
}

// list walks the keys under the prefix in the order S3 returns them, which is key order.
// Folder markers (keys ending in "/") are not objects and are skipped.
func (s *s3Store) list(ctx context.Context, loc Location, fn func(Object) bool) error {
	ctx, cancel := context.WithCancel(ctx) // stops minio-go's paging when fn says enough
	defer cancel()
	opts := minio.ListObjectsOptions{Prefix: loc.Key, Recursive: true}
	for info := range s.client.ListObjectsIter(ctx, loc.Bucket, opts) {
		if info.Err != nil {
			return classifyS3(info.Err)
		}
		if strings.HasSuffix(info.Key, "/") {
			continue
		}
		obj := Object{
			URL:         Location{Scheme: SchemeS3, Bucket: loc.Bucket, Key: info.Key}.String(),
			Size:        info.Size,
			ContentType: info.ContentType, // usually empty: listings do not carry it
		}
		if !fn(obj) {
			return nil
		}
	}
	return nil
}

// classifyS3 maps the S3 error codes that mean "not there" to ErrNotFound, keeping the
// service's message; everything else is returned as is, which callers treat as transient.
func classifyS3(err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		switch resp.Code {
		case "NoSuchKey", "NoSuchBucket":
			return fmt.Errorf("%w: %s: %s", ErrNotFound, resp.Code, resp.Message)
		}
	}
	return err
}
