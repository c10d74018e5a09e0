package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Session cookie and CSRF header of the console's actions.
const (
	CookieName = "la_console"
	CSRFHeader = "X-CSRF-Token"
)

// sessionTTL is how long a signed-in browser may act; maxSessions bounds the sessions
// held (the oldest is dropped past it).
const (
	sessionTTL  = 12 * time.Hour
	maxSessions = 1024
)

// sessions are the browsers signed in for actions: the cookie's value and its CSRF token.
type sessions struct {
	mu sync.Mutex
	m  map[string]session
}

type session struct {
	csrf    string
	expires time.Time
}

func newSessions() *sessions { return &sessions{m: map[string]session{}} }

// open starts a session and returns its cookie value and CSRF token.
func (s *sessions) open() (cookie, csrf string) {
	cookie, csrf = randomToken(), randomToken()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m {
		if now.After(v.expires) {
			delete(s.m, k)
		}
	}
	if len(s.m) >= maxSessions {
		var oldest string
		for k, v := range s.m {
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		delete(s.m, oldest)
	}
	s.m[cookie] = session{csrf: csrf, expires: now.Add(sessionTTL)}
	return cookie, csrf
}

// of is the CSRF token of r's session; ok is false without a live one.
func (s *sessions) of(r *http.Request) (csrf string, ok bool) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[c.Value]
	if !ok || time.Now().After(v.expires) {
		return "", false
	}
	return v.csrf, true
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sameOrigin reports whether r's Origin header, when it sends one, names the host it was
// sent to: a page elsewhere cannot drive the console with the operator's cookie (which
// SameSite=Strict keeps from it anyway in current browsers).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return u.Host == r.Host
}

// getSession says whether this browser may act, with its CSRF token when it may.
func (c *Console) getSession(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"actions": false, "token_required": c.cfg.Token != ""}
	if csrf, ok := c.session.of(r); ok {
		out["actions"], out["csrf"] = true, csrf
	}
	writeJSON(w, http.StatusOK, out)
}

// postSession signs a browser in for actions with LA_CONSOLE_TOKEN (any token, the empty
// one included, when none is configured: the console is then on loopback only).
func (c *Console) postSession(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "want a JSON body {\"token\": \"...\"}")
		return
	}
	if c.cfg.Token != "" {
		// Every attempt is counted before the token is compared, and one past the limit
		// is refused without comparing it, the right token too: a guesser learns nothing
		// faster than the limit lets it ask.
		if wait := c.signIns.take(r.RemoteAddr); wait > 0 {
			secs := int((wait.Round(time.Millisecond) + time.Second - 1) / time.Second) // whole seconds, up
			c.log.Info("console sign-in refused: too many attempts", "remote", r.RemoteAddr, "retry_after_s", secs)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeError(w, http.StatusTooManyRequests, "too many sign-in attempts: try again in %d s", secs)
			return
		}
		if subtle.ConstantTimeCompare([]byte(body.Token), []byte(c.cfg.Token)) != 1 {
			c.log.Info("console sign-in refused: wrong token", "remote", r.RemoteAddr) // never the token
			writeError(w, http.StatusUnauthorized, "wrong token (LA_CONSOLE_TOKEN)")
			return
		}
		c.signIns.succeeded(r.RemoteAddr)
	}
	cookie, csrf := c.session.open()
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: cookie, Path: Prefix, MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	writeJSON(w, http.StatusOK, map[string]string{"csrf": csrf})
}

// action guards a state-changing handler: a same-origin request from a signed-in browser
// whose X-CSRF-Token header is its session's; otherwise 403. The body is at most 1 MiB of
// {"ids": [...]} or {"batch": "..."}.
func (c *Console) action(h func(r *http.Request, b *backend, req actionRequest) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			writeError(w, http.StatusForbidden, "cross-origin request refused")
			return
		}
		csrf, ok := c.session.of(r)
		if !ok {
			writeError(w, http.StatusForbidden, "not signed in: POST %ssession with the token first", apiPrefix)
			return
		}
		if got := r.Header.Get(CSRFHeader); got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(csrf)) != 1 {
			writeError(w, http.StatusForbidden, "missing or wrong %s header", CSRFHeader)
			return
		}
		b := c.nats.Load()
		if b == nil {
			writeError(w, http.StatusServiceUnavailable, "starting: the console is not connected to NATS yet")
			return
		}
		var req actionRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "want a JSON body {\"ids\": [...]} or {\"batch\": \"...\"}: %v", err)
			return
		}
		if err := req.check(); err != nil {
			c.writeErr(w, r, err)
			return
		}
		v, err := h(r, b, req)
		if err != nil {
			c.writeErr(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}
