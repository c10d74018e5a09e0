package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const signInTestToken = "sign-in-test-token-0123456789"

// signInConsole is a console with a token whose sign-in limiter reads *now.
func signInConsole(t *testing.T, now *time.Time) *Console {
	t.Helper()
	c, err := New(Config{Mode: ModeOn, Token: signInTestToken}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.signIns = newSignInLimiter(func() time.Time { return *now })
	return c
}

// signIn posts a sign-in with token from remote and returns the answer.
func signIn(c *Console, remote, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, apiPrefix+"session", strings.NewReader(fmt.Sprintf(`{"token": %q}`, token)))
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, req)
	return rec
}

// TestSignInIsRateLimited: past signInBurstPerAddr wrong tokens from one address, its
// sign-ins are refused with 429 and Retry-After, the right token too, while another
// address signs in; once the wait is over the right token signs in and the address starts
// afresh. Addresses of one IPv6 /64 count as one.
func TestSignInIsRateLimited(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := signInConsole(t, &now)
	const attacker = "192.0.2.1:40000"
	for i := range signInBurstPerAddr {
		if rec := signIn(c, attacker, "wrong-token-0123456789"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d %s, want 401", i+1, rec.Code, rec.Body)
		}
	}
	for _, tok := range []string{"wrong-token-0123456789", signInTestToken} {
		rec := signIn(c, attacker, tok)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "20" {
			t.Errorf("past the limit (right token %v): %d, Retry-After %q; want 429 after 20 s",
				tok == signInTestToken, rec.Code, rec.Header().Get("Retry-After"))
		}
		if strings.Contains(rec.Body.String(), signInTestToken) {
			t.Error("the answer quotes the token")
		}
	}
	if rec := signIn(c, "198.51.100.7:1234", signInTestToken); rec.Code != http.StatusOK || len(rec.Result().Cookies()) != 1 {
		t.Errorf("another address with the right token: %d %s, want 200 and the cookie", rec.Code, rec.Body)
	}
	now = now.Add(signInEveryPerAddr - time.Second)
	if rec := signIn(c, attacker, signInTestToken); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("a second early: %d, Retry-After %q; want 429 after 1 s", rec.Code, rec.Header().Get("Retry-After"))
	}
	now = now.Add(time.Second)
	if rec := signIn(c, attacker, signInTestToken); rec.Code != http.StatusOK {
		t.Errorf("the right token once the wait is over: %d %s, want 200", rec.Code, rec.Body)
	}
	for i := range signInBurstPerAddr {
		if rec := signIn(c, attacker, "wrong-token-0123456789"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("after signing in, wrong token %d: %d, want 401 (the address starts afresh)", i+1, rec.Code)
		}
	}

	for i := range signInBurstPerAddr {
		signIn(c, fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "wrong-token-0123456789")
	}
	if rec := signIn(c, "[2001:db8:1:2:ffff::1]:443", "wrong-token-0123456789"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("another address of the same IPv6 /64: %d, want 429", rec.Code)
	}
}

// TestSignInIsRateLimitedOverAllAddresses: many addresses, each under its own limit,
// are refused together past signInBurstAll attempts; a successful sign-in spends none of
// the budget; the addresses remembered stay bounded.
func TestSignInIsRateLimitedOverAllAddresses(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := signInConsole(t, &now)
	for range 3 {
		if rec := signIn(c, "203.0.113.9:1", signInTestToken); rec.Code != http.StatusOK {
			t.Fatalf("right token: %d", rec.Code)
		}
	}
	for i := range signInBurstAll {
		if rec := signIn(c, fmt.Sprintf("10.0.%d.%d:1", i/256, i%256), "wrong-token-0123456789"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token from address %d: %d, want 401", i, rec.Code)
		}
	}
	rec := signIn(c, "10.1.0.1:1", signInTestToken)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" {
		t.Errorf("a fresh address past the limit of all: %d, Retry-After %q; want 429 after 2 s", rec.Code, rec.Header().Get("Retry-After"))
	}
	now = now.Add(signInEveryAll)
	if rec := signIn(c, "10.1.0.1:1", signInTestToken); rec.Code != http.StatusOK {
		t.Errorf("the right token once the wait is over: %d", rec.Code)
	}

	c.signIns = newSignInLimiter(func() time.Time { return now })
	c.signIns.maxAddrs, c.signIns.all.burst = 16, 1e6
	c.signIns.total.tokens = 1e6
	for i := range 1000 {
		signIn(c, fmt.Sprintf("10.2.%d.%d:1", i/256, i%256), "wrong-token-0123456789")
		now = now.Add(time.Millisecond)
	}
	if n := len(c.signIns.addrs); n > 16 {
		t.Errorf("%d addresses remembered, want at most 16", n)
	}
}
