package bearer

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGuard(t *testing.T) {
	const token = "s3cr3t-T0ken_with.all~chars+/=="
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "passed") })
	srv := httptest.NewServer(New(token, "detect").Wrap(ok))
	defer srv.Close()
	for _, c := range []struct {
		auth      string
		code      int
		challenge string
	}{
		{"", http.StatusUnauthorized, `Bearer realm="detect"`},
		{"Basic dXNlcjpwYXNz", http.StatusUnauthorized, `Bearer realm="detect"`},
		{"Bearer", http.StatusUnauthorized, `Bearer realm="detect"`},
		{"Bearer wrong", http.StatusUnauthorized, `Bearer realm="detect", error="invalid_token"`},
		{"Bearer " + token[:len(token)-1], http.StatusUnauthorized, `Bearer realm="detect", error="invalid_token"`},
		{"Bearer " + token + "x", http.StatusUnauthorized, `Bearer realm="detect", error="invalid_token"`},
		{"Bearer " + token, http.StatusOK, ""},
		{"bearer " + token, http.StatusOK, ""},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || resp.Header.Get("WWW-Authenticate") != c.challenge {
			t.Errorf("%q: %d %q, want %d with challenge %q", c.auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), c.code, c.challenge)
		}
		if c.code == http.StatusOK && string(body) != "passed" || c.code != http.StatusOK && !strings.Contains(string(body), "LA_HTTP_TOKEN") {
			t.Errorf("%q: body %q", c.auth, body)
		}
	}
}

func TestOffLetsEverythingThrough(t *testing.T) {
	g := New("", "detect")
	if g.On() {
		t.Fatal("a Guard without a token is on")
	}
	if err := g.Check(httptest.NewRequest(http.MethodGet, "/", nil)); err != nil {
		t.Fatalf("off Guard refused: %v", err)
	}
}

func TestValid(t *testing.T) {
	for _, tok := range []string{"", "abc", "A-b_c.d~e+f/g==", strings.Repeat("x", 64)} {
		if err := Valid(tok); err != nil {
			t.Errorf("%q: %v", tok, err)
		}
	}
	for _, tok := range []string{"has space", "tab\there", "new\nline", "quote\"", "=", "a=b", "é"} {
		if err := Valid(tok); err == nil {
			t.Errorf("%q accepted", tok)
		}
	}
}
