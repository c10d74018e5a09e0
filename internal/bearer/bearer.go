// Package bearer guards HTTP handlers with one static bearer token (RFC 6750): a request
// passes when its Authorization header is "Bearer <token>". The worker uses it for
// LA_HTTP_TOKEN on /predict, /info and the metrics port.
//
// The comparison is constant-time over SHA-256 sums, so neither the token's bytes nor its
// length can be learnt from how long a refusal takes.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Errors Check returns; both are answered 401.
var (
	ErrMissing = errors.New("this server needs a bearer token (LA_HTTP_TOKEN): send Authorization: Bearer <token>")
	ErrInvalid = errors.New("the bearer token is not this server's (LA_HTTP_TOKEN)")
)

// Guard checks requests against a token. The zero Guard, or one made from "", lets every
// request through.
type Guard struct {
	sum   [sha256.Size]byte
	on    bool
	realm string
}

// New is a Guard for token ("" turns it off); realm names the protected space in the
// WWW-Authenticate challenge. Check the token with Valid first.
func New(token, realm string) Guard {
	if token == "" {
		return Guard{}
	}
	return Guard{sum: sha256.Sum256([]byte(token)), on: true, realm: realm}
}

// On reports whether the Guard asks for a token.
func (g Guard) On() bool { return g.on }

// Valid reports a token that clients could not send as RFC 6750's token68: empty is fine
// (no token); otherwise letters, digits and -._~+/ with = only at the end.
func Valid(token string) error {
	trimmed := strings.TrimRight(token, "=")
	if token != "" && trimmed == "" {
		return errors.New("is only '=' padding")
	}
	for i, c := range trimmed {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.ContainsRune("-._~+/", c):
		default:
			return fmt.Errorf("has %q at byte %d; a bearer token is letters, digits and -._~+/ (with = padding at the end)", c, i)
		}
	}
	return nil
}

// Check is nil for a request that may pass: the Guard is off, or the request carries the
// token. Otherwise it is ErrMissing (no bearer credentials) or ErrInvalid.
func (g Guard) Check(r *http.Request) error {
	if !g.on {
		return nil
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ErrMissing
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(sum[:], g.sum[:]) != 1 {
		return ErrInvalid
	}
	return nil
}

// Challenge sets the WWW-Authenticate header of the 401 that answers err (from Check).
func (g Guard) Challenge(w http.ResponseWriter, err error) {
	v := fmt.Sprintf("Bearer realm=%q", g.realm)
	if errors.Is(err, ErrInvalid) {
		v += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", v)
}

// Wrap guards next: a request that fails Check is answered 401 with the challenge and the
// reason as plain text.
func (g Guard) Wrap(next http.Handler) http.Handler {
	if !g.on {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.Check(r); err != nil {
			g.Challenge(w, err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
