package submit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"os"
	"path/filepath"
	"strings"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// JobDefaults are the run's settings that an item does not override.
type JobDefaults struct {
	Query        string
	Task         engine.Task
	MaxNewTokens int
	// GenerationMode is how every job is decoded; "" leaves it to the worker
	// (LA_GENERATION_MODE) and sends no field.
	GenerationMode engine.GenerationMode
	Overlay        bool
	// OverlayFormat is the overlays' encoding; "" and "png" ask for the default (PNG).
	OverlayFormat overlay.Format
	Batch         string
	// Output is the URL prefix the worker writes result files and overlays under; "" lets
	// the worker decide.
	Output string
}

// planner turns items into jobs: it reads each local image once to hash it and, when an
// upload prefix is set, puts it in the bucket under its content hash unless it is already
// there.
type planner struct {
	defaults JobDefaults
	store    storage.Store // nil when storage is not configured
	// uploadPrefix is where local images go (s3://bucket/prefix/); "" passes local images
	// as file:// URLs, which a worker on this machine reads directly.
	uploadPrefix string
	maxBytes     int64 // larger local images are refused before reading
	dryRun       bool  // decide each image's URL but upload nothing
	// known are the local images an earlier run hashed, by path; record is told about
	// each image hashed now. Either may be nil.
	known  map[string]fileRecord
	record func(fileRecord) error
}

// plan makes the job for one item.
func (p *planner) plan(ctx context.Context, it Item) (*jobs.Job, error) {
	job := &jobs.Job{
		V:              jobs.SchemaVersion,
		Query:          it.Query,
		Task:           it.Task,
		MaxNewTokens:   p.defaults.MaxNewTokens,
		GenerationMode: p.defaults.GenerationMode,
		Overlay:        p.defaults.Overlay,
		Output:         p.defaults.Output,
		Batch:          p.defaults.Batch,
		Metadata:       it.Metadata,
	}
	if job.Query == "" {
		job.Query = p.defaults.Query
	}
	if job.Task == "" {
		job.Task = p.defaults.Task
	}
	if job.Task == "" {
		job.Task = engine.TaskDetect
	}
	// PNG is the default and is sent as no field at all: the job, and so its id, stays
	// what it was before the field existed, and workers that predate it still read it.
	if job.Overlay && p.defaults.OverlayFormat != "" && p.defaults.OverlayFormat != overlay.PNG {
		job.OverlayFormat = p.defaults.OverlayFormat
	}
	identity := it.Image
	job.Image = it.Image
	if it.Local() {
		sum, url, err := p.local(ctx, it)
		if err != nil {
			return nil, err
		}
		identity = "sha256:" + sum
		job.Image = url
	}
	job.ID = JobID(identity, JobParams{
		Query: job.Query, Task: job.Task, MaxNewTokens: job.MaxNewTokens, GenerationMode: job.GenerationMode,
		Overlay: job.Overlay, OverlayFormat: job.OverlayFormat, Batch: job.Batch,
	})
	if err := job.Validate(); err != nil {
		return nil, &ArgumentError{Err: fmt.Errorf("%s: %w", it.Origin, err)}
	}
	return job, nil
}

// local hashes a local image and decides the URL the worker reads it from, uploading it if
// needed. It returns the hex SHA-256 of the content and that URL. An image an earlier run
// hashed, unchanged in size and modification time since, is not read again.
func (p *planner) local(ctx context.Context, it Item) (sum, url string, err error) {
	info, err := os.Stat(it.Image)
	if err != nil {
		return "", "", &ArgumentError{Err: fmt.Errorf("%s: %w", it.Origin, err)}
	}
	if p.maxBytes > 0 && info.Size() > p.maxBytes {
		return "", "", &ArgumentError{Err: fmt.Errorf("%s: %d bytes, over the %d-byte image limit", it.Origin, info.Size(), p.maxBytes)}
	}
	if k, ok := p.known[it.Image]; ok && k.Size == info.Size() && k.ModTime == info.ModTime().UnixNano() &&
		k.URL == p.urlFor(it.Image, k.SHA256) {
		return k.SHA256, k.URL, nil
	}
	data, err := os.ReadFile(it.Image)
	if err != nil {
		return "", "", &ArgumentError{Err: fmt.Errorf("%s: %w", it.Origin, err)}
	}
	digest := sha256.Sum256(data)
	sum = hex.EncodeToString(digest[:])
	if url, err = p.imageURL(ctx, it, sum, data); err != nil {
		return "", "", err
	}
	if p.record != nil {
		rec := fileRecord{Path: it.Image, Size: info.Size(), ModTime: info.ModTime().UnixNano(), SHA256: sum, URL: url}
		if err := p.record(rec); err != nil {
			return "", "", err
		}
	}
	return sum, url, nil
}

// urlFor is the URL the worker reads the local image at path with content hash sum from:
// its file:// URL, or its content-addressed key under the upload prefix.
func (p *planner) urlFor(path, sum string) string {
	if p.uploadPrefix == "" {
		return "file://" + filepath.ToSlash(path)
	}
	return p.uploadPrefix + "sha256/" + sum[:2] + "/" + sum + strings.ToLower(filepath.Ext(path))
}

// imageURL is where the worker finds a local image: its file:// URL, or its
// content-addressed key under the upload prefix, uploaded when absent.
func (p *planner) imageURL(ctx context.Context, it Item, sum string, data []byte) (string, error) {
	url := p.urlFor(it.Image, sum)
	if p.uploadPrefix == "" || p.dryRun {
		return url, nil
	}
	if p.store == nil {
		return "", fmt.Errorf("%s: uploading to %s: storage is not configured", it.Origin, p.uploadPrefix)
	}
	_, err := p.store.Stat(ctx, url)
	if err == nil {
		return url, nil // the same bytes are already there
	}
	if !errors.Is(err, storage.ErrNotFound) {
		return "", fmt.Errorf("%s: checking %s: %w", it.Origin, url, err)
	}
	ctype := mime.TypeByExtension(strings.ToLower(filepath.Ext(it.Image)))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	if err := p.store.Put(ctx, url, data, ctype); err != nil {
		return "", fmt.Errorf("%s: uploading to %s: %w", it.Origin, url, err)
	}
	return url, nil
}
