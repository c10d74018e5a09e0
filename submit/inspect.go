package submit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// The inspection side of the Admin: batches, the queue overview, finding jobs by id prefix
// or by the image they were made from.

// MinPrefix is the shortest id prefix `submit status` looks up.
const MinPrefix = 4

// Batches lists every batch with jobs in LA_JOBS or results in LA_RESULTS, the one with
// the latest activity first. It reads both streams whole.
func (a *Admin) Batches(ctx context.Context) ([]BatchStatus, error) {
	byName := map[string]*BatchStatus{}
	get := func(name string) *BatchStatus {
		if name == "" {
			name = jobs.DefaultBatch
		}
		b := byName[name]
		if b == nil {
			b = &BatchStatus{Batch: name, Results: map[jobs.Status]int{}}
			byName[name] = b
		}
		return b
	}
	seen := func(b *BatchStatus, at time.Time) {
		if b.First.IsZero() || at.Before(b.First) {
			b.First = at
		}
		if at.After(b.Last) {
			b.Last = at
		}
	}
	err := jobs.QueuedJobs(ctx, a.js, func(j *jobs.Job, at time.Time) error {
		b := get(j.Batch)
		b.InQueue++
		seen(b, at)
		return nil
	})
	if err != nil {
		return nil, err
	}
	latest := map[string]map[string]jobs.Status{} // batch -> job -> its latest result
	err = jobs.ReadStream(ctx, a.js, jobs.ResultsStream, jobs.ResultSubjectPrefix+">", func(m jetstream.Msg) error {
		batch, _, _ := strings.Cut(strings.TrimPrefix(m.Subject(), jobs.ResultSubjectPrefix), ".")
		var r struct {
			ID     string      `json:"id"`
			Status jobs.Status `json:"status"`
		}
		if err := json.Unmarshal(m.Data(), &r); err != nil || r.ID == "" {
			return nil // not a result: nothing to count
		}
		b := get(batch)
		if md, err := m.Metadata(); err == nil {
			seen(b, md.Timestamp)
		}
		if latest[b.Batch] == nil {
			latest[b.Batch] = map[string]jobs.Status{}
		}
		latest[b.Batch][r.ID] = r.Status
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]BatchStatus, 0, len(byName))
	for name, b := range byName {
		for _, st := range latest[name] {
			b.Results[st]++
		}
		b.Finished = len(latest[name])
		out = append(out, *b)
	}
	slices.SortFunc(out, func(x, y BatchStatus) int {
		if c := y.Last.Compare(x.Last); c != 0 {
			return c
		}
		return strings.Compare(x.Batch, y.Batch)
	})
	return out, nil
}

// Overview is the queue at a glance: `submit status` with no argument.
type Overview struct {
	InQueue      uint64        `json:"in_queue"`      // messages in LA_JOBS: queued or running
	DeadLettered uint64        `json:"dead_lettered"` // records in LA_DLQ
	Batches      []BatchStatus `json:"batches"`       // the most recent first
	MoreBatches  int           `json:"more_batches"`  // batches left out of the list
}

// Overview counts LA_JOBS and LA_DLQ and summarises the limit most recent batches (all
// of them for limit <= 0).
func (a *Admin) Overview(ctx context.Context, limit int) (Overview, error) {
	var o Overview
	for _, s := range []struct {
		name string
		n    *uint64
	}{{jobs.JobsStream, &o.InQueue}, {jobs.DLQStream, &o.DeadLettered}} {
		st, err := a.js.Stream(ctx, s.name)
		if err != nil {
			return o, fmt.Errorf("stream %s: %w", s.name, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return o, fmt.Errorf("stream %s: %w", s.name, err)
		}
		*s.n = info.State.Msgs
	}
	batches, err := a.Batches(ctx)
	if err != nil {
		return o, err
	}
	if limit > 0 && len(batches) > limit {
		o.MoreBatches = len(batches) - limit
		batches = batches[:limit]
	}
	o.Batches = batches
	return o, nil
}

// Print prints the overview for people.
func (o Overview) Print(w io.Writer) {
	fmt.Fprintf(w, "%d jobs in the queue (queued or running), %d dead-lettered\n", o.InQueue, o.DeadLettered)
	if len(o.Batches) == 0 {
		fmt.Fprintln(w, "no batches")
		return
	}
	fmt.Fprintln(w)
	PrintBatches(w, o.Batches)
	if o.MoreBatches > 0 {
		fmt.Fprintf(w, "... and %d older batches (submit batches lists them all)\n", o.MoreBatches)
	}
}

// PrintBatches prints a table of batches.
func PrintBatches(w io.Writer, batches []BatchStatus) {
	if len(batches) == 0 {
		fmt.Fprintln(w, "no batches")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BATCH\tIN QUEUE\tFINISHED\tSUCCEEDED\tFAILED\tCANCELED\tEXPIRED\tLAST ACTIVITY")
	for _, b := range batches {
		last := "-"
		if !b.Last.IsZero() {
			last = b.Last.Local().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", b.Batch, b.InQueue, b.Finished,
			b.Results[jobs.StatusSucceeded], b.Results[jobs.StatusFailed], b.Results[jobs.StatusCanceled],
			b.Results[jobs.StatusExpired], last)
	}
	tw.Flush()
}

// JobsWithPrefix lists the jobs in the state bucket whose id starts with prefix, at most
// limit+1 of them (more than limit means the prefix is too short to tell).
func (a *Admin) JobsWithPrefix(ctx context.Context, prefix string, limit int) ([]string, error) {
	if len(prefix) < MinPrefix || !jobs.ValidToken(prefix) {
		return nil, &ArgumentError{Err: fmt.Errorf("job id prefix %q: give at least %d characters of [A-Za-z0-9_-]", prefix, MinPrefix)}
	}
	// "*" is one token: job ids, not the cancel.<id> requests beside them. The lister
	// ends (closes its channel) once it has sent every key, or when ctx ends.
	keys, err := a.state.KV().ListKeysFiltered(ctx, "*")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", jobs.StateBucket, err)
	}
	var ids []string
	for k := range keys.Keys() {
		if strings.HasPrefix(k, prefix) && !slices.Contains(ids, k) && len(ids) <= limit {
			ids = append(ids, k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// SourceJobs finds the jobs made from an image: src is a path as given to submit (or a
// file:// or s3:// URL). The output directory's records answer first (its rows and the
// jobs it published, by source, by the image's path below its input, or by its file://
// URL); when dir is empty or knows nothing of src, LA_RESULTS (of batch, if given) and
// LA_JOBS are searched for jobs whose image is src's URL or the upload of its content.
func (a *Admin) SourceJobs(ctx context.Context, src, dir, batch string) ([]string, error) {
	if dir != "" {
		ids, err := sourceJobsInDir(src, dir)
		if err != nil || len(ids) > 0 {
			return ids, err
		}
	}
	urls, suffix, err := imageURLs(src)
	if err != nil {
		return nil, err
	}
	match := func(image string) bool {
		return slices.Contains(urls, image) || (suffix != "" && strings.HasSuffix(image, suffix))
	}
	var ids []string
	add := func(id string) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	subject := jobs.ResultSubjectPrefix + ">"
	if batch != "" {
		subject = jobs.ResultSubjectPrefix + batch + ".>"
	}
	err = jobs.ReadStream(ctx, a.js, jobs.ResultsStream, subject, func(m jetstream.Msg) error {
		var r struct {
			ID    string `json:"id"`
			Image string `json:"image"`
		}
		if json.Unmarshal(m.Data(), &r) == nil && r.ID != "" && match(r.Image) {
			add(r.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = jobs.QueuedJobs(ctx, a.js, func(j *jobs.Job, _ time.Time) error {
		if (batch == "" || j.Batch == batch) && match(j.Image) {
			add(j.ID)
		}
		return nil
	})
	return ids, err
}

// sourceJobsInDir finds src in an output directory's rows and published records.
func sourceJobsInDir(src, dir string) ([]string, error) {
	st, err := readOutState(dir, false)
	if err != nil {
		return nil, err
	}
	abs := ""
	if !IsURL(src) {
		abs, _ = filepath.Abs(src)
	}
	same := func(source, image, file string) bool {
		switch {
		case source == src, image != "" && image == src, file != "" && file == filepath.ToSlash(src):
			return true
		case abs == "":
			return false
		}
		a, err := filepath.Abs(source)
		return (err == nil && a == abs) || image == "file://"+filepath.ToSlash(abs)
	}
	var ids []string
	for id, r := range st.Done {
		if same(r.Source, r.Image, r.File) {
			ids = append(ids, id)
		}
	}
	for id, source := range st.Sources {
		if _, done := st.Done[id]; !done && same(source, "", "") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// imageURLs are the URLs a job made from src names its image by: src itself for a URL; for
// a local file its file:// URL, and suffix, the end of the content-addressed key an upload
// gives it (sha256/<ab>/<sha256><ext>), when the file can be read.
func imageURLs(src string) (urls []string, suffix string, err error) {
	if IsURL(src) {
		return []string{src}, "", nil
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, "", &ArgumentError{Err: fmt.Errorf("%s: %w", src, err)}
	}
	urls = []string{"file://" + filepath.ToSlash(abs)}
	data, err := os.ReadFile(abs)
	if errors.Is(err, os.ErrNotExist) {
		return urls, "", nil // gone since: its file:// URL may still be found
	}
	if err != nil {
		return nil, "", &ArgumentError{Err: fmt.Errorf("%s: %w", src, err)}
	}
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	return urls, "sha256/" + h[:2] + "/" + h + strings.ToLower(filepath.Ext(abs)), nil
}

// dlqBatch is the batch of a dead-lettered job: the record's own field, else read from
// the job it carries (records of older workers); "" when neither says (an older record
// whose job is stored at job_url, or not JSON).
func dlqBatch(rec jobs.DLQRecord) string {
	if rec.Batch != "" {
		return rec.Batch
	}
	raw := []byte(rec.Job)
	if len(raw) == 0 {
		raw = rec.JobBase64
	}
	var j struct {
		Batch *string `json:"batch"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &j) != nil {
		return ""
	}
	if j.Batch == nil || *j.Batch == "" {
		return jobs.DefaultBatch
	}
	return *j.Batch
}

// WriteJSON prints v as indented JSON, tags such as </c> as they are.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
