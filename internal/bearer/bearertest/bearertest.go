// Package bearertest is what the tests of token-guarded servers share: one request with or
// without an Authorization header, its answer read whole.
package bearertest

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// Do sends method to url with body (nil: none) and, when auth is not empty, that
// Authorization header, and returns the response, its body already read and closed. A
// request that cannot be sent fails the test.
func Do(t testing.TB, method, url string, body []byte, auth string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}
