package httpcompat

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/locateanything/detect/internal/bearer/bearertest"
)

// TestTokenGuardsPredictAndInfo: with LA_HTTP_TOKEN set, /predict and /info answer 401
// with a Bearer challenge and FastAPI's error body unless the request carries the token,
// and answer as before when it does; the probes, /v1/models and /openapi.json stay open.
func TestTokenGuardsPredictAndInfo(t *testing.T) {
	const token = "a-long-random-token_0123456789"
	h := newHarness(t, setup{cfg: Config{Token: token}})
	body, err := json.Marshal(map[string]any{"image": dogB64(t), "query": "dog"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, path, auth string) (*http.Response, []byte) {
		t.Helper()
		var b []byte
		if method == http.MethodPost {
			b = body
		}
		return bearertest.Do(t, method, h.url+path, b, auth)
	}
	for _, route := range []struct{ method, path string }{{http.MethodPost, "/predict"}, {http.MethodGet, "/info"}} {
		for _, c := range []struct {
			auth, challenge, detail string
		}{
			{"", `Bearer realm="locateanything-detect"`, "send Authorization: Bearer <token>"},
			{"Bearer not-" + token, `Bearer realm="locateanything-detect", error="invalid_token"`, "not this server's"},
			{"Basic " + token, `Bearer realm="locateanything-detect"`, "send Authorization: Bearer <token>"},
		} {
			resp, out := send(route.method, route.path, c.auth)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != c.challenge ||
				!strings.Contains(detailString(t, out), c.detail) || strings.Contains(string(out), token) {
				t.Errorf("%s %s with %q: %d %q %s; want 401, challenge %q, a detail with %q and never the token",
					route.method, route.path, c.auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), out, c.challenge, c.detail)
			}
		}
		if resp, out := send(route.method, route.path, "Bearer "+token); resp.StatusCode != http.StatusOK {
			t.Errorf("%s %s with the token: %d %.300s", route.method, route.path, resp.StatusCode, out)
		}
	}
	if n := h.eng.Calls("dog"); n != 1 {
		t.Errorf("the engine ran %d times; only the request with the token should reach it", n)
	}
	for _, path := range []string{"/health", "/livez", "/readyz", "/v1/models", "/openapi.json"} {
		if resp, out := send(http.MethodGet, path, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("%s without a token: %d %.200s, want 200", path, resp.StatusCode, out)
		}
	}
}

// TestTokenMustBeSendable: a token no client could send in an Authorization header stops
// New with an error naming LA_HTTP_TOKEN, never echoing the token.
func TestTokenMustBeSendable(t *testing.T) {
	for _, token := range []string{"has space", "line\nbreak", "é-accent"} {
		_, err := New(testConfig(Config{Token: token}), Options{})
		if err == nil || !strings.Contains(err.Error(), "LA_HTTP_TOKEN") || strings.Contains(err.Error(), token) {
			t.Errorf("token %q: %v; want an error naming LA_HTTP_TOKEN without the token", token, err)
		}
	}
}
