package main

import (
	"errors"
	"flag"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/httpcompat"
)

// smokeServer is the real httpcompat handler on a chip over the engine double.
func smokeServer(t *testing.T, ready bool) (*httptest.Server, *httpcompat.Server, *chip.Chip) {
	t.Helper()
	eng := enginetest.New()
	c, err := chip.Open(func() (engine.Engine, error) { return eng, nil })
	if err != nil {
		t.Fatal(err)
	}
	var hc config.HTTP
	if err := envconfig.Process("", &hc); err != nil { // the worker's defaults
		t.Fatal(err)
	}
	srv, err := httpcompat.New(hc, httpcompat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ready {
		if err := srv.SetReady(c); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		_ = c.Close()
	})
	return ts, srv, c
}

func runSmokeLine(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	err := runSmoke(args, &out)
	line := out.String()
	if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("want exactly one line, got %q", line)
	}
	return strings.TrimSuffix(line, "\n"), err
}

var smokePassLineRE = regexp.MustCompile(`^PASS 2 boxes labels=\["dog","bicycle"\] tokens=19 eos=true grid=\[24, 44\] canon=\[616, 336\] ` +
	`mode=ar_greedy vision=49ms prefill=58ms decode=475ms \(40\.0 tok/s\) total=582ms model=LocateAnything-3B engine=double$`)

func TestSmokePassesAndSavesTheOverlay(t *testing.T) {
	ts, _, _ := smokeServer(t, true)
	save := filepath.Join(t.TempDir(), "overlay.png")
	line, err := runSmokeLine(t, "--url", ts.URL+"/", "--image", "../../testdata/images/dog.jpg", "--query", "dog</c>bicycle", "--save", save)
	if err != nil || !smokePassLineRE.MatchString(line) {
		t.Fatalf("line %q, err %v; want %s", line, err, smokePassLineRE)
	}
	f, err := os.Open(save)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("saved overlay: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 576 {
		t.Fatalf("saved overlay is %v, want 768x576", b)
	}
}

func TestSmokeWaitsForReadiness(t *testing.T) {
	_, srv, c := smokeServer(t, false)
	polled := make(chan struct{}, 1)
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			select {
			case polled <- struct{}{}:
			default:
			}
		}
		srv.Handler().ServeHTTP(w, r)
	}))
	defer counting.Close()

	done := make(chan string, 1)
	go func() {
		line, _ := runSmokeLine(t, "--url", counting.URL, "--image", "../../testdata/images/dog.jpg", "--query", "dog</c>bicycle")
		done <- line
	}()
	<-polled // it asked while the server was starting...
	if err := srv.SetReady(c); err != nil {
		t.Fatal(err)
	}
	if line := <-done; !smokePassLineRE.MatchString(line) { // ...and passed once it was ready
		t.Fatalf("line %q", line)
	}
}

func TestSmokeFails(t *testing.T) {
	ready, _, _ := smokeServer(t, true)
	starting, _, _ := smokeServer(t, false)
	notAnImage := filepath.Join(t.TempDir(), "notes.jpg")
	if err := os.WriteFile(notAnImage, []byte("not a picture"), 0o644); err != nil {
		t.Fatal(err)
	}
	closedPort := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return "http://" + ln.Addr().String()
	}()
	incomplete := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			_, _ = w.Write([]byte(`{"status":"ok","model":"m","device":"d"}`))
		case "/info":
			_, _ = w.Write([]byte(`{"model":"m"}`))
		default:
			_, _ = w.Write([]byte(`{"query":"dog","detections":[]}`))
		}
	}))
	defer incomplete.Close()

	img := "../../testdata/images/dog.jpg"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no image flag", []string{"--url", ready.URL, "--query", "dog"}, "--image is required"},
		{"no query flag", []string{"--url", ready.URL, "--image", img}, "--query is required"},
		{"unknown flag", []string{"--colour", "red"}, "flags:"},
		{"missing image file", []string{"--url", ready.URL, "--image", "../../testdata/images/none.jpg", "--query", "dog"}, "read image"},
		{"server never ready", []string{"--url", starting.URL, "--image", img, "--query", "dog", "--wait", "300ms"}, `not ready after 300ms: last /health: status "starting"`},
		{"nothing listening", []string{"--url", closedPort, "--image", img, "--query", "dog", "--wait", "1ms"}, "connection refused"},
		{"bad image", []string{"--url", ready.URL, "--image", notAnImage, "--query", "dog"}, "HTTP 400: cannot decode image"},
		{"budget out of range", []string{"--url", ready.URL, "--image", img, "--query", "dog", "--max-new-tokens", "5000"}, "HTTP 400: max_new_tokens"},
		{"no boxes", []string{"--url", ready.URL, "--image", img, "--query", enginetest.NothingLabel}, "0 boxes"},
		{"incomplete answer", []string{"--url", incomplete.URL, "--image", img, "--query", "dog"}, "answer lacks width, height"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			line, err := runSmokeLine(t, c.args...)
			if !errors.Is(err, errSmokeFailed) {
				t.Fatalf("err %v, want errSmokeFailed", err)
			}
			if !strings.HasPrefix(line, "FAIL ") || !strings.Contains(line, c.want) {
				t.Fatalf("line %q, want FAIL mentioning %q", line, c.want)
			}
		})
	}
}

func TestSmokeHelpIsNotAFailure(t *testing.T) {
	var out strings.Builder
	if err := runSmoke([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	if s := out.String(); strings.Contains(s, "FAIL") || !strings.Contains(s, "-query") {
		t.Fatalf("help output %q", s)
	}
}

func TestSmokeHonoursTheBudget(t *testing.T) {
	ts, _, _ := smokeServer(t, true)
	line, err := runSmokeLine(t, "--url", ts.URL, "--image", "../../testdata/images/dog.jpg", "--query", "dog", "--max-new-tokens", "9")
	if err != nil || !strings.Contains(line, "tokens=9 eos=false") {
		t.Fatalf("line %q err %v; want the budget of 9 hit before EOS", line, err)
	}
}

// TestSmokeSendsTheToken: against a server that requires LA_HTTP_TOKEN, smoke passes when
// the same variable is set in its environment, and says 401 when it is not.
func TestSmokeSendsTheToken(t *testing.T) {
	t.Setenv("LA_HTTP_TOKEN", "smoke-token-0123456789")
	ts, _, _ := smokeServer(t, true) // reads the worker's settings: the token included
	line, err := runSmokeLine(t, "--url", ts.URL, "--image", "../../testdata/images/dog.jpg", "--query", "dog</c>bicycle")
	if err != nil || !smokePassLineRE.MatchString(line) {
		t.Fatalf("with the token: line %q, err %v", line, err)
	}
	t.Setenv("LA_HTTP_TOKEN", "")
	line, err = runSmokeLine(t, "--url", ts.URL, "--image", "../../testdata/images/dog.jpg", "--query", "dog</c>bicycle", "--wait", "1s")
	if err == nil || !strings.Contains(line, "HTTP 401") {
		t.Fatalf("without the token: line %q, err %v; want a FAIL naming HTTP 401", line, err)
	}
}

// TestSmokeFindsTheServerOfLA_HTTP_ADDR: without --url, smoke checks the server the
// worker's LA_HTTP_ADDR names, on loopback when it listens on every interface.
func TestSmokeFindsTheServerOfLA_HTTP_ADDR(t *testing.T) {
	for addr, want := range map[string]string{
		":20000": "http://127.0.0.1:20000", "0.0.0.0:8080": "http://127.0.0.1:8080", "[::]:9": "http://127.0.0.1:9",
		"10.0.0.5:7000": "http://10.0.0.5:7000", "[::1]:7000": "http://[::1]:7000", "off": "http://127.0.0.1:20000",
	} {
		if got := smokeURL(addr); got != want {
			t.Errorf("smokeURL(%q) = %q, want %q", addr, got, want)
		}
	}
	ts, _, _ := smokeServer(t, true)
	t.Setenv("LA_HTTP_ADDR", strings.TrimPrefix(ts.URL, "http://"))
	line, err := runSmokeLine(t, "--image", "../../testdata/images/dog.jpg", "--query", "dog</c>bicycle")
	if err != nil || !smokePassLineRE.MatchString(line) {
		t.Fatalf("line %q, err %v; want a PASS from the server of LA_HTTP_ADDR", line, err)
	}
}
