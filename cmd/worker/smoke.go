package main

// `worker smoke` checks a live server the way the upstream server's smoke_test.py does. It
// talks HTTP with the standard library only, so the check can be read and trusted without
// the rest of the module; the server's address and token default from the worker's own
// settings (LA_HTTP_ADDR, LA_HTTP_TOKEN), read as the service reads them.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/cli"
)

// smokePollInterval is how often /health is asked while the server is starting.
const smokePollInterval = 250 * time.Millisecond

// smokeKeys are the /predict response fields the contract promises (docs/background.md, "The /predict contract").
var smokeKeys = []string{
	"query", "width", "height", "canonical_size", "grid_hw", "num_image_tokens", "prompt_tokens",
	"prefill_tokens", "raw_text", "detections", "points", "num_generated_tokens", "stopped_on_eos",
	"decode_mode", "timing_ms", "overlay_png_b64",
}

type smokeOptions struct {
	url          string
	image        string
	query        string
	save         string
	wait         time.Duration
	timeout      time.Duration
	maxNewTokens int
	minBoxes     int
	token        string // LA_HTTP_TOKEN: sent as a bearer token when set
}

// smokePrediction is the part of the /predict response the check reads.
type smokePrediction struct {
	Detections []struct {
		Label   string     `json:"label"`
		Box     [4]float64 `json:"box"`
		BoxNorm [4]int     `json:"box_norm"`
	} `json:"detections"`
	NumGeneratedTokens int     `json:"num_generated_tokens"`
	StoppedOnEOS       bool    `json:"stopped_on_eos"`
	GridHW             [2]int  `json:"grid_hw"`
	CanonicalSize      [2]int  `json:"canonical_size"`
	DecodeMode         string  `json:"decode_mode"`
	OverlayPNGBase64   *string `json:"overlay_png_b64"`
	TimingMS           struct {
		Vision     float64 `json:"vision"`
		Prefill    float64 `json:"prefill"`
		Decode     float64 `json:"decode"`
		Total      float64 `json:"total"`
		DecodeTokS float64 `json:"decode_tok_s"`
	} `json:"timing_ms"`
}

// runSmoke is `worker smoke --url URL --image F --query Q [--save overlay.png]`: wait for
// GET /health to say ok, read GET /info, POST /predict with return_overlay, check the answer,
// and print one line, `PASS ...` or `FAIL reason`. It returns errSmokeFailed after a FAIL,
// and flag.ErrHelp after printing the usage for -h.
func runSmoke(args []string, stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	opts, err := parseSmokeFlags(args, cfg.HTTP)
	if errors.Is(err, flag.ErrHelp) {
		return flagError(err, smokeHelp, stdout) // help.go: the help every command prints
	}
	if err != nil {
		fmt.Fprintf(stdout, "FAIL %v\n", err)
		return errSmokeFailed
	}
	line, err := smokeCheck(opts)
	if err != nil {
		fmt.Fprintf(stdout, "FAIL %v\n", err)
		return errSmokeFailed
	}
	fmt.Fprintln(stdout, line)
	return nil
}

// smokeFlags defines `worker smoke`'s flags on o; --url defaults to the server the worker
// with settings hc serves.
func smokeFlags(o *smokeOptions, hc config.HTTP) *flag.FlagSet {
	fs := flag.NewFlagSet("worker smoke", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a flag error becomes the FAIL line; --help prints the help
	fs.StringVar(&o.url, "url", smokeURL(hc.Addr), "base `URL` of the server (default: LA_HTTP_ADDR's, on 127.0.0.1 when it listens on every interface)")
	fs.StringVar(&o.image, "image", "", "PNG or JPEG `FILE` to send (required)")
	fs.StringVar(&o.query, "query", "", "query; several categories joined with </c> (required)")
	fs.StringVar(&o.save, "save", "", "write the overlay PNG to this `FILE`")
	fs.DurationVar(&o.wait, "wait", 2*time.Minute, "how long to wait for /health to say ok")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit for the /predict call")
	fs.IntVar(&o.maxNewTokens, "max-new-tokens", 0, "token budget (0: the server's default)")
	fs.IntVar(&o.minBoxes, "min-boxes", 1, "fail with fewer boxes than this")
	return fs
}

// smokeURL is the base URL a client on this machine reaches a /predict server listening
// on addr at (LA_HTTP_ADDR: ":20000" is http://127.0.0.1:20000); an address that is no
// host:port ("off") gives the default port's.
func smokeURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = "", "20000"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func parseSmokeFlags(args []string, hc config.HTTP) (smokeOptions, error) {
	var o smokeOptions
	fs := smokeFlags(&o, hc)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return o, err
	}
	switch {
	case err != nil:
		return o, fmt.Errorf("flags: %w", err)
	case fs.NArg() > 0:
		return o, fmt.Errorf("flags: unexpected argument %q", fs.Arg(0))
	case o.image == "":
		return o, errors.New("flags: --image is required")
	case o.query == "":
		return o, errors.New("flags: --query is required")
	}
	o.url = strings.TrimSuffix(o.url, "/")
	o.token = hc.Token // the server's own variable, LA_HTTP_TOKEN; never a flag, which ps would show
	return o, nil
}

// smokeCheck runs the checks and returns the PASS line.
func smokeCheck(o smokeOptions) (string, error) {
	img, err := os.ReadFile(o.image)
	if err != nil {
		return "", fmt.Errorf("read image: %w", err)
	}
	ctx := context.Background()
	if err := smokeWaitHealthy(ctx, o.url, o.wait, o.token); err != nil {
		return "", err
	}

	var info map[string]any
	if err := smokeGet(ctx, o.url+"/info", 30*time.Second, o.token, &info); err != nil {
		return "", fmt.Errorf("GET /info: %w", err)
	}
	model, ok := info["model"].(string)
	if !ok {
		return "", errors.New("GET /info: no model name in the answer")
	}
	// What answered, for the PASS line: the wrong model or a simulated chip shows there.
	answeredBy := "model=" + model
	if w, ok := info["worker"].(map[string]any); ok {
		if b, ok := w["backend"].(string); ok {
			answeredBy += " engine=" + b
		}
		if sim, _ := w["simulated"].(bool); sim {
			answeredBy += " SIMULATED"
		}
	}

	body := map[string]any{
		"image":          base64.StdEncoding.EncodeToString(img),
		"query":          o.query,
		"return_overlay": true,
	}
	if o.maxNewTokens > 0 {
		body["max_new_tokens"] = o.maxNewTokens
	}
	raw, err := smokePost(ctx, o.url+"/predict", o.timeout, o.token, body)
	if err != nil {
		return "", fmt.Errorf("POST /predict: %w", err)
	}
	pred, err := smokeCheckPrediction(raw)
	if err != nil {
		return "", fmt.Errorf("POST /predict: %w", err)
	}
	if len(pred.Detections) < o.minBoxes {
		return "", fmt.Errorf("%d boxes for %q, want at least %d (raw answer: %s)", len(pred.Detections), o.query, o.minBoxes, smokeRawText(raw))
	}
	overlay, err := base64.StdEncoding.DecodeString(*pred.OverlayPNGBase64)
	if err != nil {
		return "", fmt.Errorf("overlay_png_b64 is not base64: %w", err)
	}
	if _, err := png.DecodeConfig(bytes.NewReader(overlay)); err != nil {
		return "", fmt.Errorf("overlay_png_b64 is not a PNG: %w", err)
	}
	if o.save != "" {
		if err := os.WriteFile(o.save, overlay, 0o644); err != nil {
			return "", fmt.Errorf("save overlay: %w", err)
		}
	}
	return smokePassLine(pred) + " " + answeredBy, nil
}

// smokeWaitHealthy asks GET /health until it says ok or wait has passed.
func smokeWaitHealthy(ctx context.Context, base string, wait time.Duration, token string) error {
	deadline := time.Now().Add(wait)
	last := "no answer"
	for {
		var h struct {
			Status string `json:"status"`
		}
		err := smokeGet(ctx, base+"/health", 5*time.Second, token, &h)
		switch {
		case err == nil && h.Status == "ok":
			return nil
		case err == nil:
			last = fmt.Sprintf("status %q", h.Status)
		default:
			last = err.Error()
		}
		if time.Now().Add(smokePollInterval).After(deadline) {
			return fmt.Errorf("server not ready after %v: last /health: %s", wait, last)
		}
		time.Sleep(smokePollInterval)
	}
}

func smokeGet(ctx context.Context, url string, timeout time.Duration, token string, into any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	raw, err := smokeSend(req, token)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("answer is not the expected JSON: %w", err)
	}
	return nil
}

func smokePost(ctx context.Context, url string, timeout time.Duration, token string, body any) ([]byte, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return smokeSend(req, token)
}

// smokeSend does req, with the bearer token when there is one, and returns the body of a
// 200; any other status is an error carrying the server's detail.
func smokeSend(req *http.Request, token string) ([]byte, error) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Detail any `json:"detail"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Detail != nil {
			return nil, fmt.Errorf("HTTP %d: %v", resp.StatusCode, e.Detail)
		}
		return nil, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, raw)
	}
	return raw, nil
}

// smokeCheckPrediction insists on every contract field, then reads the ones the line shows.
func smokeCheckPrediction(raw []byte) (*smokePrediction, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("answer is not a JSON object: %w", err)
	}
	var missing []string
	for _, k := range smokeKeys {
		if _, ok := fields[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("answer lacks %s", strings.Join(missing, ", "))
	}
	var p smokePrediction
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("answer has a field of the wrong type: %w", err)
	}
	if p.OverlayPNGBase64 == nil {
		return nil, errors.New("overlay_png_b64 is null although return_overlay was true")
	}
	return &p, nil
}

func smokeRawText(raw []byte) string {
	var r struct {
		RawText string `json:"raw_text"`
	}
	_ = json.Unmarshal(raw, &r)
	return fmt.Sprintf("%q", r.RawText)
}

func smokePassLine(p *smokePrediction) string {
	labels := make([]string, len(p.Detections))
	for i, d := range p.Detections {
		labels[i] = d.Label
	}
	quoted, _ := json.Marshal(labels)
	t := p.TimingMS
	return fmt.Sprintf("PASS %d boxes labels=%s tokens=%d eos=%t grid=[%d, %d] canon=[%d, %d] mode=%s "+
		"vision=%.0fms prefill=%.0fms decode=%.0fms (%.1f tok/s) total=%.0fms",
		len(p.Detections), quoted, p.NumGeneratedTokens, p.StoppedOnEOS, p.GridHW[0], p.GridHW[1],
		p.CanonicalSize[0], p.CanonicalSize[1], p.DecodeMode, t.Vision, t.Prefill, t.Decode, t.DecodeTokS, t.Total)
}
