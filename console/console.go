// Package console is the web console for the people who run the service: a page under
// /console/ on a worker's /predict server (docs/console.md) and the JSON API it reads
// (/console/api/...). It shows the whole deployment, not one worker: it reads NATS (the
// results, dead-letter and job streams, the state bucket, the workers' heartbeats) and
// storage, so any worker's console shows every worker's work.
//
// Reading is open to whoever reaches the page; acting (replay, cancel) needs a session
// signed in with LA_CONSOLE_TOKEN, a CSRF header and a same-origin request. Pictures are
// read only through the storage layer (its roots and S3 credentials), from the URLs the
// results name, never from a path in the request. Thumbnails are made on demand, one at a
// time, on a thread of their own at the lowest priority (never a chip's thread), and
// cached in storage next to the overlay.
//
// Lifecycle: New (the handler answers 503 until Start), Start once NATS is connected, and
// the context given to Start ends the goroutines it started (its done channel closes).
package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// Prefix is where the console is mounted on the /predict server; apiPrefix its API.
const (
	Prefix    = "/console/"
	apiPrefix = Prefix + "api/"
)

// Options are what the console needs besides its Config.
type Options struct {
	Logger *slog.Logger // nil: discard
	// Store reads pictures and stored results and writes thumbnails (the worker's storage
	// Router); nil serves no pictures.
	Store storage.Store
	// MaxResults bounds the results the index keeps; 0 is DefaultMaxResults.
	MaxResults int
	// Refresh is how old the queue counts may be before a page's request asks JetStream
	// again; 0 is 2 s.
	Refresh time.Duration
	// OpTimeout bounds each NATS or storage operation of a request; 0 is 10 s.
	OpTimeout time.Duration
}

// Console serves the page and its API. Create it with New.
type Console struct {
	cfg       Config
	opts      Options
	log       *slog.Logger
	idx       *index
	handler   http.Handler
	thumbs    chan struct{}     // held for a thumbnail's whole making (see thumbnail): one at a time
	thumbTurn time.Duration     // how long a thumbnail request waits for its turn (thumbTurnWait)
	thumbReqs chan thumbRequest // to the thumbnail goroutine (thumbMaker)
	session   *sessions
	signIns   *signInLimiter // attempts to sign in with a token, per address and in all

	nats atomic.Pointer[backend] // nil until Start
}

// backend is what Start hands over.
type backend struct {
	js     jetstream.JetStream
	state  *jobs.StateStore
	queue  *queueView
	dlq    *dlqView
	queued *queuedIndex // the job messages' ids in LA_JOBS, for a job's page
}

// New builds a console that answers 503 to its API until Start.
func New(cfg Config, opts Options) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Refresh <= 0 {
		opts.Refresh = 2 * time.Second
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 10 * time.Second
	}
	c := &Console{
		cfg: cfg, opts: opts, log: opts.Logger,
		idx:       newIndex(opts.MaxResults),
		thumbs:    make(chan struct{}, 1),
		thumbTurn: thumbTurnWait,
		thumbReqs: make(chan thumbRequest),
		session:   newSessions(),
		signIns:   newSignInLimiter(time.Now),
	}
	c.handler = c.routes()
	return c, nil
}

// Handler serves everything under Prefix; mount it there.
func (c *Console) Handler() http.Handler { return c.handler }

// Start connects the console to NATS: it starts following LA_RESULTS into the index, and
// the thumbnail maker, on goroutines that end with ctx (done is closed once both have).
func (c *Console) Start(ctx context.Context, js jetstream.JetStream, state *jobs.StateStore) (done <-chan struct{}, err error) {
	if js == nil || state == nil {
		return nil, errors.New("console: Start needs JetStream and the state store")
	}
	queued := newQueuedIndex()
	b := &backend{
		js: js, state: state, queued: queued,
		queue: &queueView{js: js, every: c.opts.Refresh, queued: queued},
		dlq:   &dlqView{js: js, every: c.opts.Refresh / 2},
	}
	if !c.nats.CompareAndSwap(nil, b) {
		return nil, errors.New("console: Start called twice")
	}
	d, thumbsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(thumbsDone)
		thumbMaker(ctx, c.thumbReqs, newThumbPacer(), func(err error) {
			if err != nil {
				c.log.Warn("console: thumbnails are made at normal priority", "err", err)
			}
		})
	}()
	go func() {
		defer close(d)
		defer func() { <-thumbsDone }()
		for ctx.Err() == nil {
			err := follow(ctx, js, c.opts.Store, c.idx, c.opts.OpTimeout, func(err error) {
				c.log.Debug("console: reading results", "err", err)
			})
			if err == nil || ctx.Err() != nil {
				return
			}
			c.log.Warn("console: reading results stopped; again in a second", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return d, nil
}
