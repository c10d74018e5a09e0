package storage

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/locateanything/detect/internal/tlsfiles"
)

// s3Store serves s3:// URLs through minio-go, which also does the retrying.
type s3Store struct {
	client *minio.Client
	core   minio.Core // the same client: one GET that returns the body with its headers
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
	return &s3Store{client: client, core: minio.Core{Client: client}}, nil
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
	system, err := x509.SystemCertPool()
	if err != nil {
		system = nil // no system roots on this machine: trust the file alone
	}
	pool, err := tlsfiles.CertPool(file, system)
	if err != nil {
		return nil, fmt.Errorf("LA_S3_CA_FILE: %w", err)
	}
	return pool, nil
}

// checkNames refuses, as a bad URL, a bucket or key that minio-go would refuse before
// sending anything, with an error that does not say what kind it is. ParseURL applies the
// same rules; this keeps the two from drifting apart unnoticed.
func checkNames(loc Location, prefix bool) error {
	if err := s3utils.CheckValidBucketName(loc.Bucket); err != nil {
		return &URLError{URL: loc.String(), Part: "bucket", Reason: err.Error()}
	}
	check := s3utils.CheckValidObjectName
	if prefix {
		check = s3utils.CheckValidObjectNamePrefix
	}
	if err := check(loc.Key); err != nil {
		return &URLError{URL: loc.String(), Part: "key", Reason: err.Error()}
	}
	return nil
}

// stat is a HEAD. Its error answers carry no body, so a 403 cannot tell a refused object
// from wrong credentials: it counts as access denied.
func (s *s3Store) stat(ctx context.Context, loc Location) (Object, error) {
	if err := checkNames(loc, false); err != nil {
		return Object{}, err
	}
	info, err := s.client.StatObject(ctx, loc.Bucket, loc.Key, minio.StatObjectOptions{})
	if err != nil {
		return Object{}, classifyS3(err)
	}
	return Object{URL: loc.String(), Size: info.Size, ContentType: info.ContentType}, nil
}

// get sends one GET and refuses an object whose Content-Length is over the limit before
// reading its body, then reads at most maxBytes+1 bytes, so an object sent without a
// length, or longer than announced, is refused too. (A GET rather than a HEAD first: an
// error answer to a GET has a body whose code tells wrong credentials, which are worth
// retrying once fixed, from an object this caller may not read.)
func (s *s3Store) get(ctx context.Context, loc Location, maxBytes int64) ([]byte, error) {
	if err := checkNames(loc, false); err != nil {
		return nil, err
	}
	body, info, _, err := s.core.GetObject(ctx, loc.Bucket, loc.Key, minio.GetObjectOptions{})
	if err != nil {
		return nil, classifyS3(err)
	}
	defer body.Close()
	if info.Size > maxBytes {
		return nil, fmt.Errorf("%w: over the limit of %d bytes", ErrTooLarge, maxBytes) // not the size: as file://
	}
	data, err := readLimited(body, maxBytes)
	if err != nil && !errors.Is(err, ErrTooLarge) {
		return nil, classifyS3(err)
	}
	return data, err
}

func (s *s3Store) put(ctx context.Context, loc Location, data []byte, contentType string) error {
	if err := checkNames(loc, false); err != nil {
		return err
	}
	if err := fileLikePrefix(loc); err != nil {
		return err
	}
	_, err := s.client.PutObject(ctx, loc.Bucket, loc.Key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType})
	if err != nil {
		return classifyS3(err)
	}
	return nil
}

// fileLikePrefix refuses a key below a prefix segment shaped like a file a worker writes
// (FileLikeName), as file:// refuses to create such a folder: on a service that keeps
// objects as files (versitygw's posix backend, a file-system gateway) the folder
// victim-1.json/ would take the place of the object victim-1.json.
func fileLikePrefix(loc Location) error {
	segments := strings.Split(loc.Key, "/")
	for _, seg := range segments[:len(segments)-1] {
		if FileLikeName(seg) {
			return fmt.Errorf("%w: s3://%s/%s: will not write below %q: a file a worker writes (a result, an overlay) "+
				"may have that name", ErrNotAllowed, loc.Bucket, loc.Key, seg+"/")
		}
	}
	return nil
}

// remove deletes the object; one that does not exist is no error (S3 says nothing either).
func (s *s3Store) remove(ctx context.Context, loc Location) error {
	if err := checkNames(loc, false); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, loc.Bucket, loc.Key, minio.RemoveObjectOptions{}); err != nil {
		return classifyS3(err)
	}
	return nil
}

// list walks the keys under the prefix in the order S3 returns them, which is key order.
// Folder markers (keys ending in "/") are not objects and are skipped.
func (s *s3Store) list(ctx context.Context, loc Location, fn func(Object) bool) error {
	if err := checkNames(loc, true); err != nil {
		return err
	}
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

// classifyS3 wraps an answer of the S3 service that no retry changes in its sentinel (see
// s3Sentinel) and names the service's code in every answer's message. Errors that are
// not answers (connection refused, timeouts, a cancelled context) pass through as they
// are: transient.
func classifyS3(err error) error {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return err
	}
	code := resp.Code // "SlowDown"; "503 Service Unavailable" for an answer without a body
	if sentinel := s3Sentinel(resp); sentinel != nil {
		return fmt.Errorf("%w (%s): %w", sentinel, code, err)
	}
	if code == "" || code == resp.Message {
		return err
	}
	return fmt.Errorf("%s: %w", code, err)
}

// s3Sentinel classifies an S3 error answer: the sentinel of a permanent failure, or nil
// for one worth retrying. Codes that concern the worker rather than the object (its
// credentials, region, endpoint or clock) are retried: once the worker is fixed the same
// job works. The status decides for codes not named here: 404 not found, 403 access
// denied, other 4xx refused, except 408, 409, 429 and 499; 5xx and the rest are retried.
func s3Sentinel(resp minio.ErrorResponse) error {
	switch resp.Code {
	case "NoSuchKey", "NoSuchBucket", "NoSuchVersion":
		return ErrNotFound
	case "EntityTooLarge":
		return ErrTooLarge
	case "InvalidBucketName", "KeyTooLongError", "InvalidObjectName", "XMinioInvalidObjectName":
		return ErrBadURL
	case "AccessDenied", "AllAccessDisabled", "AccountProblem":
		return ErrAccessDenied
	case "ExistingObjectIsDirectory", "ObjectParentIsFile", "DirectoryObjectContainsData":
		// Services that keep objects as files (versitygw's posix backend): a key that
		// collides with a folder, or runs through an object. 409, but no retry helps.
		return ErrRefused
	case "XAdminUserNotFound": // versitygw's answer to an unknown access key (AWS: InvalidAccessKeyId)
		return nil
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException",
		"InvalidToken", "TokenRefreshRequired", "RequestTimeTooSkewed", "AuthorizationHeaderMalformed",
		"PermanentRedirect", "TemporaryRedirect", "Redirect", "InvalidRegion",
		"RequestTimeout", "SlowDown", "SlowDownRead", "SlowDownWrite", "Throttling", "ThrottlingException",
		"RequestLimitExceeded", "RequestThrottled", "InternalError", "ServiceUnavailable",
		"OperationAborted", "Conflict", "BadDigest", "IncompleteBody", "XAmzContentSHA256Mismatch":
		return nil
	}
	switch s := resp.StatusCode; {
	case s == http.StatusNotFound:
		return ErrNotFound
	case s == http.StatusForbidden:
		return ErrAccessDenied
	case s == http.StatusRequestTimeout, s == http.StatusConflict, s == http.StatusTooManyRequests, s == 499:
		return nil
	case s >= 400 && s < 500:
		return ErrRefused
	}
	return nil
}
