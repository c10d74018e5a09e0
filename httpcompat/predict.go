package httpcompat

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/internal/imagemem"
)

// limits are what /predict checks before the engine sees a request.
type limits struct{ maxNewTokens, maxQueryChars int }

// limitsFor reads the limits the engine states (LA_MAX_NEW_TOKENS_CAP reaches it through
// the worker's configuration). An engine that states no token cap leaves the check to
// Prepare; the query limit is the contract's own.
func limitsFor(in engine.Info) limits {
	l := limits{maxNewTokens: in.MaxNewTokensCap, maxQueryChars: in.MaxQueryChars}
	if l.maxNewTokens <= 0 {
		l.maxNewTokens = math.MaxInt32
	}
	if l.maxQueryChars <= 0 {
		l.maxQueryChars = engine.MaxQueryChars
	}
	return l
}

// handlePredict is POST /predict: receive and check the body, prepare on this goroutine, wait
// for the chip ahead of queued jobs, draw the overlay after the chip is released. A request
// takes an upload slot (MaxUploading) while its body arrives and is decoded, and a pending
// slot (MaxPending) only after that, so slow clients cannot keep others from the chip.
func (s *Server) handlePredict(w http.ResponseWriter, r *http.Request) {
	st := s.ready.Load()
	if st == nil {
		s.writeStarting(w)
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), s.predictBudget())
	defer cancel()

	ereq, wantOverlay, ok := s.receive(ctx, w, r, st, start) // the body and its base64 image die there
	if !ok {
		return
	}
	if n := s.pending.Add(1); n > int64(s.cfg.MaxPending) {
		s.pending.Add(-1)
		s.log.Warn("predict refused: too many requests pending", "max", s.cfg.MaxPending)
		w.Header().Set("Retry-After", "5")
		s.writeDetail(w, http.StatusServiceUnavailable,
			"%d requests are already waiting for the chip (LA_HTTP_MAX_PENDING); retry later", s.cfg.MaxPending)
		return
	}
	defer s.pending.Add(-1)
	reserved, ok := s.reserveMemory(ctx, w, r, ereq.Image, wantOverlay)
	if !ok {
		return
	}
	defer s.memory.Release(reserved) // the decoded image and the overlay are dropped by then

	eng := st.dev.Engine()
	prep, err := eng.Prepare(ctx, ereq)
	if err != nil {
		s.fail(w, r, fmt.Errorf("prepare: %w", err))
		return
	}
	pred, err := st.dev.Generate(ctx, chip.Interactive, prep)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.opts.Metrics.decoded(pred)
	var overlay *string
	if wantOverlay {
		png, err := eng.Overlay(prep, pred)
		if err != nil {
			s.fail(w, r, fmt.Errorf("overlay: %w", err))
			return
		}
		b64 := base64.StdEncoding.EncodeToString(png)
		overlay = &b64
	}
	s.writeJSON(w, http.StatusOK, NewPredictResponse(pred, overlay))
	s.log.Info("predict", "status", http.StatusOK, "query", pred.Query, "boxes", len(pred.Detections),
		"points", len(pred.Points), "tokens", pred.NumGeneratedTokens, "eos", pred.StoppedOnEOS,
		"device_ms", pred.TimingMS.Total, "ms", time.Since(start).Milliseconds())
}

// receive reads, parses and checks a /predict body while the request holds an upload slot,
// and answers what is wrong with it: the engine's request, and whether an overlay is wanted.
func (s *Server) receive(ctx context.Context, w http.ResponseWriter, r *http.Request, st *readyState, start time.Time) (ereq engine.Request, overlay, ok bool) {
	if n := s.uploading.Add(1); n > int64(s.cfg.MaxUploading) {
		s.uploading.Add(-1)
		s.log.Warn("predict refused: too many requests uploading", "max", s.cfg.MaxUploading)
		w.Header().Set("Retry-After", "5")
		s.writeDetail(w, http.StatusServiceUnavailable,
			"%d requests are already sending their bodies (LA_HTTP_MAX_UPLOADING); retry later", s.cfg.MaxUploading)
		return ereq, false, false
	}
	defer s.uploading.Add(-1)
	body, err := s.readBody(w, r, start)
	if err != nil {
		s.writeBodyError(w, err)
		return ereq, false, false
	}
	req, invalid, err := s.parseBody(r.Header.Get("Content-Type"), body)
	if err != nil {
		s.writeDetail(w, http.StatusBadRequest, "%v", err)
		return ereq, false, false
	}
	if len(invalid) > 0 {
		s.writeJSON(w, http.StatusUnprocessableEntity, validationErrors{Detail: invalid})
		return ereq, false, false
	}
	ereq, err = checkRequest(req, limitsFor(st.info))
	if err != nil {
		if ie, ok := engine.AsInputError(err); ok {
			s.log.Info("predict", "status", http.StatusBadRequest, "code", ie.Code, "err", err)
		}
		s.writeDetail(w, http.StatusBadRequest, "%v", err)
		return ereq, false, false
	}
	if req.ImageURL != "" {
		if ereq.Image, ok = s.fetchImage(ctx, w, r, req.ImageURL); !ok {
			return ereq, false, false
		}
	}
	return ereq, req.ReturnOverlay, true
}

// reserveMemory takes from the memory budget (MaxDecodedBytes) what the request's image
// will hold once decoded (imagemem.Cost), waiting for it as long as the request may take, and
// returns the bytes to release. When it cannot it answers: 413 for an image that needs more
// than the whole budget, 503 when the others did not leave room in time.
func (s *Server) reserveMemory(ctx context.Context, w http.ResponseWriter, r *http.Request, img []byte, overlay bool) (int64, bool) {
	cost, width, height := imagemem.Cost(img, overlay)
	what := fmt.Sprintf("the %dx%d image", width, height)
	if width == 0 {
		what = fmt.Sprintf("the %d-byte image", len(img))
	}
	if cost > s.cfg.MaxDecodedBytes {
		s.log.Warn("predict refused: image over the memory budget", "status", http.StatusRequestEntityTooLarge,
			"width", width, "height", height, "bytes", cost, "budget", s.cfg.MaxDecodedBytes)
		s.writeDetail(w, http.StatusRequestEntityTooLarge,
			"%s needs about %d bytes of memory to decode and prepare, more than the %d bytes all requests share (LA_HTTP_MAX_DECODED_BYTES)",
			what, cost, s.cfg.MaxDecodedBytes)
		return 0, false
	}
	if err := s.memory.Acquire(ctx, cost); err != nil {
		if r.Context().Err() != nil {
			s.fail(w, r, fmt.Errorf("waiting for image memory: %w", err))
			return 0, false
		}
		s.log.Warn("predict timed out waiting for image memory", "bytes", cost, "budget", s.cfg.MaxDecodedBytes)
		w.Header().Set("Retry-After", "5")
		s.writeDetail(w, http.StatusServiceUnavailable,
			"%s needs about %d bytes of memory, and the requests ahead of it held the %d bytes all requests share (LA_HTTP_MAX_DECODED_BYTES) for longer than %v; retry later",
			what, cost, s.cfg.MaxDecodedBytes, s.predictBudget())
		return 0, false
	}
	return cost, true
}

// predictBudget is how long one /predict may take: the write timeout less a margin to
// still write the error, so a request stuck behind others gets a 503 rather than a cut
// connection.
func (s *Server) predictBudget() time.Duration {
	margin := min(5*time.Second, s.cfg.WriteTimeout/10)
	return s.cfg.WriteTimeout - margin
}

// checkRequest applies the contract's limits and turns the request into the engine's. Its
// errors are the 400s: the Python pipeline's ValueErrors.
func checkRequest(req predictRequest, lim limits) (engine.Request, error) {
	if strings.TrimSpace(req.Query) == "" {
		return engine.Request{}, errors.New("query must not be empty")
	}
	if n := utf8.RuneCountInString(req.Query); n > lim.maxQueryChars {
		return engine.Request{}, fmt.Errorf("query is %d characters; the limit is %d", n, lim.maxQueryChars)
	}
	budget := 0 // the engine's default
	if req.MaxNewTokens != nil {
		n := *req.MaxNewTokens
		if err := engine.BudgetError(float64(n), lim.maxNewTokens); err != nil {
			return engine.Request{}, err
		}
		budget = int(n)
	}
	task := req.Task
	if task == "" {
		task = engine.TaskDetect
	}
	if !task.Valid() {
		return engine.Request{}, fmt.Errorf("unknown task %q; use one of %s", task, engine.Tasks.List())
	}
	if req.GenerationMode != "" && !req.GenerationMode.Valid() {
		return engine.Request{}, engine.InputErrorf(engine.CodeBadGeneration,
			"unknown generation_mode %q; use one of %s (or leave it out for the server's default)",
			req.GenerationMode, engine.GenerationModes.List())
	}
	var img []byte // nil for an image_url: receive fetches it once the rest is checked
	switch {
	case req.ImageBytes != nil:
		if len(req.ImageBytes) == 0 {
			return engine.Request{}, errors.New("image is empty")
		}
		img = req.ImageBytes
	case req.ImageURL == "":
		var err error
		if img, err = decodeImage(req.Image); err != nil {
			return engine.Request{}, err
		}
	}
	return engine.Request{Image: img, Query: req.Query, Task: task, MaxNewTokens: budget, GenerationMode: req.GenerationMode}, nil
}

// fail answers a request that the engine or the chip could not serve.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if ie, ok := engine.AsInputError(err); ok {
		s.log.Info("predict", "status", http.StatusBadRequest, "code", ie.Code, "err", err)
		s.writeDetail(w, http.StatusBadRequest, "%s", ie.Error())
		return
	}
	switch {
	case r.Context().Err() != nil:
		// The client has gone away: nobody reads this, the log keeps the count.
		s.log.Info("predict: client went away", "status", StatusClientClosedRequest, "err", err)
		w.WriteHeader(StatusClientClosedRequest)
	case errors.Is(err, chip.ErrClosed):
		w.Header().Set("Retry-After", "5")
		s.writeDetail(w, http.StatusServiceUnavailable, "the server is shutting down")
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("predict timed out", "budget", s.predictBudget(), "err", err)
		w.Header().Set("Retry-After", "5")
		s.writeDetail(w, http.StatusServiceUnavailable,
			"the request did not finish within %v (LA_HTTP_WRITE_TIMEOUT); the chip is busy, retry later", s.predictBudget())
	default:
		s.log.Error("predict failed", "status", http.StatusInternalServerError, "err", err)
		s.writeDetail(w, http.StatusInternalServerError, "RuntimeError: %v", err)
	}
}

func (s *Server) writeStarting(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	s.writeDetail(w, http.StatusServiceUnavailable, "model is starting; GET /health says \"ok\" once it is ready")
}
