package console

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

// Sign-in attempts allowed (POST api/session with a token to compare): per client address
// (an IPv4 address, an IPv6 /64), a burst of signInBurstPerAddr and then one per
// signInEveryPerAddr; over all addresses together a burst of signInBurstAll and then one
// per signInEveryAll, so that many addresses cannot guess faster either. A successful
// sign-in gives its attempt back. maxSignInAddrs bounds the addresses remembered.
const (
	signInBurstPerAddr = 5
	signInEveryPerAddr = 20 * time.Second
	signInBurstAll     = 50
	signInEveryAll     = 2 * time.Second
	maxSignInAddrs     = 4096
)

// rate is a token bucket's shape: burst tokens at most, one more every every.
type rate struct {
	burst float64
	every time.Duration
}

// bucket is a token bucket refilled by the clock when it is used: no goroutine keeps it.
type bucket struct {
	tokens float64
	at     time.Time
}

func fullBucket(r rate, now time.Time) bucket { return bucket{tokens: r.burst, at: now} }

// level is the tokens the bucket holds at now: those it had, plus those accrued since.
func (b *bucket) level(r rate, now time.Time) float64 {
	if !now.After(b.at) {
		return b.tokens
	}
	return min(r.burst, b.tokens+float64(now.Sub(b.at))/float64(r.every))
}

// fill adds the tokens accrued since the bucket was last used.
func (b *bucket) fill(r rate, now time.Time) {
	if now.After(b.at) {
		b.tokens, b.at = b.level(r, now), now
	}
}

// wait is how long until the (filled) bucket holds a whole token.
func (b *bucket) wait(r rate) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - b.tokens) * float64(r.every)))
}

// signInLimiter counts sign-in attempts per client address and over all of them. An
// attempt takes a token from both buckets before the token is compared, so that requests
// sent at once cannot all be compared; a successful one gives them back.
type signInLimiter struct {
	perAddr, all rate
	maxAddrs     int
	now          func() time.Time

	mu    sync.Mutex // guards the fields below
	addrs map[netip.Prefix]*bucket
	total bucket
}

func newSignInLimiter(now func() time.Time) *signInLimiter {
	perAddr := rate{burst: signInBurstPerAddr, every: signInEveryPerAddr}
	all := rate{burst: signInBurstAll, every: signInEveryAll}
	return &signInLimiter{
		perAddr: perAddr, all: all, maxAddrs: maxSignInAddrs, now: now,
		addrs: map[netip.Prefix]*bucket{}, total: fullBucket(all, now()),
	}
}

// clientOf is the bucket's key of a request's RemoteAddr: the IPv4 address, or the IPv6
// /64 (one host is given a whole /64 as easily as one address). An address that does not
// parse (not a TCP peer) shares the zero key.
func clientOf(remoteAddr string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// take spends an attempt of remoteAddr's: 0 when it may be made, else how long until it
// may (and nothing is spent).
func (l *signInLimiter) take(remoteAddr string) time.Duration {
	key, now := clientOf(remoteAddr), l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.addrs[key]
	if !ok {
		l.makeRoom(now)
		nb := fullBucket(l.perAddr, now)
		b = &nb
		l.addrs[key] = b
	}
	b.fill(l.perAddr, now)
	l.total.fill(l.all, now)
	if wait := max(b.wait(l.perAddr), l.total.wait(l.all)); wait > 0 {
		return wait
	}
	b.tokens--
	l.total.tokens--
	return 0
}

// succeeded gives back the attempt a right token spent: remoteAddr's address starts
// afresh, and the attempt counts no more against everyone's.
func (l *signInLimiter) succeeded(remoteAddr string) {
	key, now := clientOf(remoteAddr), l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.addrs, key)
	l.total.fill(l.all, now)
	l.total.tokens = min(l.all.burst, l.total.tokens+1)
}

// makeRoom keeps the addresses remembered under maxAddrs: it forgets those whose bucket
// has refilled (they remember nothing), then, if still full, the one used longest ago.
func (l *signInLimiter) makeRoom(now time.Time) {
	if len(l.addrs) < l.maxAddrs {
		return
	}
	var oldest netip.Prefix
	var oldestAt time.Time
	for k, b := range l.addrs {
		if b.level(l.perAddr, now) >= l.perAddr.burst {
			delete(l.addrs, k)
			continue
		}
		if oldestAt.IsZero() || b.at.Before(oldestAt) {
			oldest, oldestAt = k, b.at
		}
	}
	if len(l.addrs) >= l.maxAddrs {
		delete(l.addrs, oldest)
	}
}
