package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// CleanFilter picks the results whose stored files Clean removes: those of one batch, or
// those finished before a moment; exactly one is set.
type CleanFilter struct {
	Batch  string    // the results of this batch
	Before time.Time // the results of every batch finished before this
}

// CleanReport is what Clean found, and removed when told to.
type CleanReport struct {
	Results int      `json:"results"` // results chosen
	Objects []string `json:"objects"` // their stored files: result JSON, overlay, spilled job
	Removed int      `json:"removed"` // objects removed or found gone already (0 for a listing)
	Applied bool     `json:"applied"` // the objects were removed, not only listed
}

// Clean removes what workers stored for the chosen results, on file:// and s3:// alike:
// each result's JSON (<output>/<id>.json), its overlay (<id>.png or <id>.jpg), a
// dead-lettered job's spilled bytes (<id>.job.json) and the web console's thumbnail
// (<id>.thumb.jpg). Only the files that exist are listed, counted and removed: most
// results have no spilled job and no thumbnail. Without apply it only lists them.
// It removes nothing else: a URL a result names that is not one of these files of its
// own job is left alone, and so are the result messages in LA_RESULTS (they age out
// after LA_RESULTS_MAX_AGE) and the copies a run wrote into its output directory.
func (a *Admin) Clean(ctx context.Context, f CleanFilter, apply bool) (CleanReport, error) {
	rep := CleanReport{Objects: []string{}, Applied: apply}
	subject := jobs.ResultSubjectPrefix + ">"
	switch {
	case (f.Batch == "") == f.Before.IsZero():
		return rep, &ArgumentError{Err: errors.New("clean: give a batch or an age, not both")}
	case f.Batch != "" && !jobs.ValidToken(f.Batch):
		return rep, &ArgumentError{Err: fmt.Errorf("batch %q must be 1-128 characters of [A-Za-z0-9_-]", f.Batch)}
	case f.Batch != "":
		subject = jobs.ResultSubjectPrefix + f.Batch + ".>"
	}
	if a.store == nil {
		return rep, errors.New("clean: storage is not configured (LA_S3_* or LA_FILE_ROOTS): the results' files cannot be reached")
	}
	seen := map[string]bool{}
	err := jobs.ReadStream(ctx, a.js, jobs.ResultsStream, subject, func(m jetstream.Msg) error {
		var r jobs.Result
		if err := json.Unmarshal(m.Data(), &r); err != nil || r.ID == "" {
			return nil // not a result
		}
		if !f.Before.IsZero() && !r.FinishedAt.Before(f.Before) {
			return nil
		}
		rep.Results++
		for _, u := range artifacts(r) {
			if seen[u] {
				continue
			}
			seen[u] = true
			_, err := a.store.Stat(ctx, u)
			switch {
			case errors.Is(err, storage.ErrNotFound):
				continue // never stored (no spilled job, no thumbnail) or already removed
			case err != nil:
				return fmt.Errorf("clean: look for %s: %w", u, err)
			}
			rep.Objects = append(rep.Objects, u)
		}
		return nil
	})
	if err != nil || !apply {
		return rep, err
	}
	for _, u := range rep.Objects {
		if err := a.store.Delete(ctx, u); err != nil {
			return rep, fmt.Errorf("clean: remove %s: %w", u, err)
		}
		rep.Removed++
	}
	return rep, nil
}

// artifacts are the stored files of a result: its JSON, the spilled job beside it, its
// overlay and the web console's thumbnail beside the overlay or the JSON
// (<id>.thumb.jpg), each only when its URL ends with the job's own file name, so that a result
// naming something else never makes Clean remove it.
func artifacts(r jobs.Result) []string {
	var out []string
	if base, ok := strings.CutSuffix(r.ResultURL, "/"+r.ID+".json"); ok && base != "" {
		out = append(out, r.ResultURL, base+"/"+r.ID+".job.json", base+"/"+r.ID+jobs.ThumbSuffix)
	}
	if r.OverlayURL != nil {
		u := *r.OverlayURL
		if strings.HasSuffix(u, "/"+r.ID+".png") || strings.HasSuffix(u, "/"+r.ID+".jpg") {
			out = append(out, u)
			if thumb := u[:len(u)-len(".png")] + jobs.ThumbSuffix; !slices.Contains(out, thumb) {
				out = append(out, thumb)
			}
		}
	}
	return out
}
