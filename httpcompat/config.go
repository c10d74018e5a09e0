package httpcompat

import (
	"strings"
	"time"

	"github.com/locateanything/detect/internal/bearer"
	"github.com/locateanything/detect/internal/settings"
)

// Config is the server's process-level configuration, declared once here: each field's
// `envconfig` tag is its variable, `default` its default and `desc` its meaning (package
// config embeds Config in the worker's settings and reads them from the environment).
// Validate is the one check of the values.
type Config struct {
	Addr              string        `envconfig:"LA_HTTP_ADDR" default:":20000" desc:"address of the synchronous /predict server (docs/http.md); off disables it"`
	MaxBodyBytes      int64         `envconfig:"LA_HTTP_MAX_BODY_BYTES" default:"67108864" desc:"largest /predict body: a 47 MiB image, base64-encoded, plus JSON"`
	ReadHeaderTimeout time.Duration `envconfig:"LA_HTTP_READ_HEADER_TIMEOUT" default:"10s" desc:"time a client has to send a request's headers"`
	ReadTimeout       time.Duration `envconfig:"LA_HTTP_READ_TIMEOUT" default:"2m" desc:"time a client has to send a whole request, body included"`
	// WriteTimeout bounds a whole /predict, waiting for the chip included. A request that
	// cannot finish in time is abandoned shortly before it so the client still gets an answer.
	WriteTimeout    time.Duration `envconfig:"LA_HTTP_WRITE_TIMEOUT" default:"10m" desc:"time from the end of a request's headers to the end of its answer, the chip included"`
	IdleTimeout     time.Duration `envconfig:"LA_HTTP_IDLE_TIMEOUT" default:"2m" desc:"how long an idle keep-alive connection stays open"`
	ShutdownTimeout time.Duration `envconfig:"LA_HTTP_SHUTDOWN_TIMEOUT" default:"90s" desc:"drain time for requests in flight at shutdown (tt-model stop allows 120 s)"`
	// MaxPending bounds the /predict requests whose body has arrived and been decoded and
	// that are being prepared, waiting for the chip or running; one more is answered 503 at
	// once. A request still sending its body is not pending (MaxUploading bounds those), so
	// slow clients cannot keep others from the chip.
	MaxPending int `envconfig:"LA_HTTP_MAX_PENDING" default:"64" desc:"/predict requests past their body at once; one more is answered 503"`
	// MaxUploading bounds the /predict requests still sending their body (and being parsed);
	// one more is answered 503 at once.
	MaxUploading int `envconfig:"LA_HTTP_MAX_UPLOADING" default:"256" desc:"/predict requests still sending their body at once; one more is answered 503"`
	// BodyTimeout is the longest pause allowed while a /predict body arrives, and the grace
	// before MinBodyRate applies: a body that stalls that long, or whose average rate since
	// the headers falls below MinBodyRate once BodyTimeout has passed, is cut with 408.
	BodyTimeout time.Duration `envconfig:"LA_HTTP_BODY_TIMEOUT" default:"10s" desc:"longest pause in a /predict body, and the grace before LA_HTTP_MIN_BODY_RATE applies"`
	// MinBodyRate is the slowest average a /predict body may arrive at, in bytes per second.
	MinBodyRate int64 `envconfig:"LA_HTTP_MIN_BODY_RATE" default:"65536" desc:"bytes/s a /predict body must average after the grace"`
	// MaxDecodedBytes is the memory the pending /predict requests may hold for their images
	// at once, as estimated from each image's header before it is decoded (imagemem.Cost). A
	// request that does not fit waits for it as long as it may wait for the chip; an image
	// that alone needs more is refused with 413. 2 GiB holds four 36-megapixel 16-bit PNGs
	// being prepared.
	MaxDecodedBytes int64 `envconfig:"LA_HTTP_MAX_DECODED_BYTES" default:"2147483648" desc:"image memory all pending /predict requests share, estimated from each image's header"`
	// Token, when set, is the bearer token /predict and /info require (Authorization: Bearer
	// <token>; 401 otherwise); the worker's metrics port requires it for /metrics too. The
	// probes, /v1/models and /openapi.json stay open. Optional: "" is no token.
	Token string `envconfig:"LA_HTTP_TOKEN" secret:"true" desc:"bearer token /predict, /info and /metrics require; empty: none (docs/http.md)"`
	// ImageURLs lets /predict take an image_url instead of the image, fetched through
	// Options.Images (which it then requires: the worker's storage Router, with the roots and
	// S3 credentials its jobs use); off, image_url is refused with 400. Opt-in, since it lets
	// an HTTP client read any image below those roots.
	ImageURLs bool `envconfig:"LA_HTTP_IMAGE_URLS" default:"false" desc:"true: /predict takes an image_url, read through LA_FILE_ROOTS and the S3 credentials (docs/http.md)"`
}

// Enabled reports whether the server runs: LA_HTTP_ADDR is neither off nor empty.
func (c Config) Enabled() bool { return !strings.EqualFold(c.Addr, "off") && c.Addr != "" }

// Validate reports every setting the server cannot run with, each naming its variable.
func (c Config) Validate() error {
	var v settings.Check
	v.Positive("LA_HTTP_MAX_BODY_BYTES", c.MaxBodyBytes)
	v.Positive("LA_HTTP_MAX_PENDING", int64(c.MaxPending))
	v.Positive("LA_HTTP_MAX_UPLOADING", int64(c.MaxUploading))
	v.PositiveDuration("LA_HTTP_BODY_TIMEOUT", c.BodyTimeout)
	v.Positive("LA_HTTP_MIN_BODY_RATE", c.MinBodyRate)
	v.Positive("LA_HTTP_MAX_DECODED_BYTES", c.MaxDecodedBytes)
	v.PositiveDuration("LA_HTTP_READ_HEADER_TIMEOUT", c.ReadHeaderTimeout)
	v.PositiveDuration("LA_HTTP_READ_TIMEOUT", c.ReadTimeout)
	v.PositiveDuration("LA_HTTP_WRITE_TIMEOUT", c.WriteTimeout)
	v.PositiveDuration("LA_HTTP_IDLE_TIMEOUT", c.IdleTimeout)
	v.PositiveDuration("LA_HTTP_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	if err := bearer.Valid(c.Token); err != nil {
		v.Add("LA_HTTP_TOKEN %v", err) // never the token itself: Validate's errors are logged
	}
	return v.Err()
}
