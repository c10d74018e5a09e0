package console

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/locateanything/detect/jobs"
)

// DefaultMaxResults bounds the results the index keeps: the oldest are forgotten past it
// (about 200 bytes each plus 20 per detection: some 60 MB for a million with a few boxes).
const DefaultMaxResults = 1_000_000

// det is one detection as the gallery needs it: the label as an index into its batch's
// label table, so that a hundred thousand results hold each label's text once.
type det struct {
	label int32
	score float32
	box   [4]float32
}

// summary is what the index keeps of a job's latest result: enough to count, filter and
// draw the gallery; the whole result is read from NATS or storage when a job is opened.
type summary struct {
	id        string
	batch     *batchIndex
	pos       int // in batch.items; -1 once replaced or forgotten
	status    jobs.Status
	code      string
	dets      []det
	width     int32
	height    int32
	size      int32 // bytes of the result message
	attempt   int32
	truncated bool // a reference message: dets are from the stored result, if it could be read
	finished  time.Time
	started   time.Time // finished less the job's queue wait and total: about when it was published
	overlay   string    // URL of the stored overlay, "" when none
	resultURL string
	image     string
}

// live reports whether s is still its job's latest result in the index.
func (s *summary) live() bool { return s.pos >= 0 }

// batchIndex is one batch's results in the order they arrived, with running counts.
type batchIndex struct {
	name     string
	items    []*summary // nil where a result was replaced or forgotten
	dead     int        // nil entries in items
	labels   []string   // label table: det.label indexes it
	labelIdx map[string]int32
	labelN   []int // detections per label, over the live results
	status   map[jobs.Status]int
	codes    map[string]int
	first    time.Time // earliest start of a live result
	last     time.Time // latest finish
}

func newBatch(name string) *batchIndex {
	return &batchIndex{name: name, labelIdx: map[string]int32{}, status: map[jobs.Status]int{}, codes: map[string]int{}}
}

func (b *batchIndex) labelOf(name string) int32 {
	if i, ok := b.labelIdx[name]; ok {
		return i
	}
	i := int32(len(b.labels))
	b.labels = append(b.labels, name)
	b.labelN = append(b.labelN, 0)
	b.labelIdx[name] = i
	return i
}

// count adds (n=1) or removes (n=-1) s from the batch's counts.
func (b *batchIndex) count(s *summary, n int) {
	b.status[s.status] += n
	if s.code != "" {
		b.codes[s.code] += n
		if b.codes[s.code] == 0 {
			delete(b.codes, s.code)
		}
	}
	for _, d := range s.dets {
		b.labelN[d.label] += n
	}
}

func (b *batchIndex) live() int { return len(b.items) - b.dead }

// remove takes s out of the batch, compacting items once most of it is holes.
func (b *batchIndex) remove(s *summary) {
	b.count(s, -1)
	b.items[s.pos] = nil
	s.pos = -1
	b.dead++
	if b.dead > 1024 && b.dead > len(b.items)/2 {
		kept := b.items[:0]
		for _, it := range b.items {
			if it != nil {
				it.pos = len(kept)
				kept = append(kept, it)
			}
		}
		clear(b.items[len(kept):])
		b.items, b.dead = kept, 0
	}
}

// rateWindow is the span succeeded_per_min and failed_per_min count over.
const rateWindow = time.Minute

// index is the in-memory summary of every result on LA_RESULTS (the latest per job id),
// by batch. One goroutine (follow) adds to it; the API's handlers read it. It is bounded:
// past max results the oldest are forgotten.
type index struct {
	mu      sync.RWMutex
	max     int
	byID    map[string]*summary
	batches map[string]*batchIndex
	order   []*summary // arrival order, for forgetting the oldest; holds replaced ones until passed
	head    int        // order[:head] are gone
	recent  []event    // results of the last rateWindow, oldest first
	lastSeq uint64     // stream sequence of the last message folded in
}

// event is one result's arrival, for the rates.
type event struct {
	at     time.Time
	failed bool
}

func newIndex(max int) *index {
	if max <= 0 {
		max = DefaultMaxResults
	}
	return &index{max: max, byID: map[string]*summary{}, batches: map[string]*batchIndex{}}
}

// add folds in the result res, published at, of size bytes, at stream sequence seq: it
// replaces the job's earlier result (a replay's new answer, say).
func (x *index) add(res *jobs.Result, size int, seq uint64, at time.Time) {
	if res.ID == "" || res.Batch == "" {
		return // not a result: nothing to show
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.lastSeq = max(x.lastSeq, seq)
	if old, ok := x.byID[res.ID]; ok && old.live() {
		old.batch.remove(old)
	}
	b, ok := x.batches[res.Batch]
	if !ok {
		b = newBatch(res.Batch)
		x.batches[res.Batch] = b
	}
	s := &summary{
		id: res.ID, batch: b, pos: len(b.items), status: res.Status,
		width: int32(res.Width), height: int32(res.Height), size: int32(size), attempt: int32(res.Attempt),
		truncated: res.Truncated, finished: res.FinishedAt, resultURL: res.ResultURL, image: res.Image,
	}
	if res.Error != nil {
		s.code = res.Error.Code
	}
	if res.OverlayURL != nil {
		s.overlay = *res.OverlayURL
	}
	wait := time.Duration((res.TimingMS.QueueWait + res.TimingMS.Total) * float64(time.Millisecond))
	s.started = res.FinishedAt.Add(-wait)
	if len(res.Detections) > 0 {
		s.dets = make([]det, len(res.Detections))
		for i, d := range res.Detections {
			s.dets[i] = det{label: b.labelOf(d.Label), score: float32(d.Score),
				box: [4]float32{float32(d.Box[0]), float32(d.Box[1]), float32(d.Box[2]), float32(d.Box[3])}}
		}
	}
	b.items = append(b.items, s)
	b.count(s, 1)
	if b.first.IsZero() || s.started.Before(b.first) {
		b.first = s.started
	}
	if s.finished.After(b.last) {
		b.last = s.finished
	}
	x.byID[res.ID] = s
	x.order = append(x.order, s)
	x.forgetOldest()
	if time.Since(at) < rateWindow {
		x.recent = append(x.recent, event{at: at, failed: res.Status == jobs.StatusFailed})
	}
}

// forgetOldest drops the oldest results while there are more than max.
func (x *index) forgetOldest() {
	for len(x.byID) > x.max && x.head < len(x.order) {
		s := x.order[x.head]
		x.order[x.head] = nil
		x.head++
		if !s.live() {
			continue
		}
		s.batch.remove(s)
		delete(x.byID, s.id)
		if s.batch.live() == 0 {
			delete(x.batches, s.batch.name)
		}
	}
	if x.head > 4096 && x.head > len(x.order)/2 {
		x.order = slices.Clone(x.order[x.head:])
		x.head = 0
	}
}

// rates are the succeeded and failed results per minute over the last rateWindow.
func (x *index) rates(now time.Time) (succeeded, failed float64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	cut := 0
	for cut < len(x.recent) && now.Sub(x.recent[cut].at) >= rateWindow {
		cut++
	}
	x.recent = x.recent[cut:]
	for _, e := range x.recent {
		if e.failed {
			failed++
		} else {
			succeeded++
		}
	}
	perMin := float64(time.Minute) / float64(rateWindow)
	return succeeded * perMin, failed * perMin
}

// batchStats is one batch's counts as the batches page shows them (pending comes from the
// queue).
type batchStats struct {
	Batch      string         `json:"batch"`
	Total      int            `json:"total"`
	Succeeded  int            `json:"succeeded"`
	Failed     int            `json:"failed"`
	Pending    int            `json:"pending"`
	Canceled   int            `json:"canceled"`
	Expired    int            `json:"expired"`
	StartedAt  *time.Time     `json:"started_at"`
	FinishedAt *time.Time     `json:"finished_at"` // null while jobs are pending
	JobsPerS   float64        `json:"jobs_per_s"`
	Labels     map[string]int `json:"labels"`
}

// batchList is every batch's counts, newest activity first; pending is the queue's count
// per batch.
func (x *index) batchList(pending map[string]int) []batchStats {
	x.mu.RLock()
	out := make([]batchStats, 0, len(x.batches))
	for _, b := range x.batches {
		out = append(out, b.stats(pending[b.name]))
	}
	for name, n := range pending { // batches with nothing finished yet
		if _, ok := x.batches[name]; !ok {
			out = append(out, batchStats{Batch: name, Total: n, Pending: n, Labels: map[string]int{}})
		}
	}
	x.mu.RUnlock()
	slices.SortFunc(out, func(a, b batchStats) int {
		ta, tb := timeOr(a.FinishedAt, a.StartedAt), timeOr(b.FinishedAt, b.StartedAt)
		if c := tb.Compare(ta); c != 0 {
			return c
		}
		return cmp.Compare(a.Batch, b.Batch)
	})
	return out
}

// timeOr is the first of ts that is set, the zero time otherwise.
func timeOr(ts ...*time.Time) time.Time {
	for _, t := range ts {
		if t != nil {
			return *t
		}
	}
	return time.Time{}
}

func (b *batchIndex) stats(pending int) batchStats {
	st := batchStats{
		Batch: b.name, Succeeded: b.status[jobs.StatusSucceeded], Failed: b.status[jobs.StatusFailed],
		Canceled: b.status[jobs.StatusCanceled], Expired: b.status[jobs.StatusExpired], Pending: pending,
		Labels: map[string]int{},
	}
	st.Total = b.live() + pending
	for i, n := range b.labelN {
		if n > 0 {
			st.Labels[b.labels[i]] = n
		}
	}
	if !b.first.IsZero() {
		first, last := b.first.UTC(), b.last.UTC()
		st.StartedAt = &first
		if pending == 0 {
			st.FinishedAt = &last
		}
		if span := b.last.Sub(b.first).Seconds(); span > 0 {
			st.JobsPerS = float64(b.live()) / span
		}
	}
	return st
}

// errorCounts is the failed results held, by code, most first.
func (x *index) errorCounts() []codeCount {
	x.mu.RLock()
	n := map[string]int{}
	for _, b := range x.batches {
		for c, k := range b.codes {
			n[c] += k
		}
	}
	x.mu.RUnlock()
	out := make([]codeCount, 0, len(n))
	for c, k := range n {
		out = append(out, codeCount{Code: c, Count: k})
	}
	slices.SortFunc(out, func(a, b codeCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return cmp.Compare(a.Code, b.Code)
	})
	return out
}

type codeCount struct {
	Code  string `json:"code"`
	Count int    `json:"count"`
}

// filter is the gallery's query: an item matches when it has the status and code asked
// (either may be empty: any), and, when a label is asked, one detection of that label
// with a score of at least minScore (without a label, any detection scoring that much when
// minScore > 0).
type filter struct {
	label    string
	minScore float64
	status   string
	code     string
}

// galleryItem is one result as the gallery lists it.
type galleryItem struct {
	ID         string      `json:"id"`
	Status     jobs.Status `json:"status"`
	Code       string      `json:"code"`
	Detections []detection `json:"detections"`
	Width      int         `json:"width"`
	Height     int         `json:"height"`
	Overlay    bool        `json:"overlay"`
	Truncated  bool        `json:"truncated,omitempty"`
	FinishedAt time.Time   `json:"finished_at"`
	Thumb      string      `json:"thumb"`
	Picture    string      `json:"picture"`
	Attempt    int         `json:"attempt"`
}

type detection struct {
	Label string     `json:"label"`
	Score float64    `json:"score"`
	BBox  [4]float64 `json:"bbox"`
}

// gallery is one page of a batch's results that match f, in arrival order, with the
// number that match and the batch's labels and codes; ok is false for an unknown batch.
type galleryPage struct {
	Total   int           `json:"total"`
	Page    int           `json:"page"`
	PerPage int           `json:"per_page"`
	Labels  []string      `json:"labels"`
	Codes   []string      `json:"codes"`
	Items   []galleryItem `json:"items"`
}

func (x *index) gallery(batch string, f filter, page, perPage int) (galleryPage, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := galleryPage{Page: page, PerPage: perPage, Labels: []string{}, Codes: []string{}, Items: []galleryItem{}}
	b, ok := x.batches[batch]
	if !ok {
		return out, false
	}
	for i, n := range b.labelN {
		if n > 0 {
			out.Labels = append(out.Labels, b.labels[i])
		}
	}
	slices.Sort(out.Labels)
	for c := range b.codes {
		out.Codes = append(out.Codes, c)
	}
	slices.Sort(out.Codes)
	label := int32(-1)
	if f.label != "" {
		i, ok := b.labelIdx[f.label]
		if !ok {
			return out, true // no result has it
		}
		label = i
	}
	minScore := float32(f.minScore)
	from := (page - 1) * perPage
	for _, s := range b.items {
		if s == nil || (f.status != "" && string(s.status) != f.status) || (f.code != "" && s.code != f.code) {
			continue
		}
		if (label >= 0 || minScore > 0) && !s.hasDetection(label, minScore) {
			continue
		}
		if out.Total >= from && len(out.Items) < perPage {
			out.Items = append(out.Items, s.item(b))
		}
		out.Total++
	}
	return out, true
}

// hasDetection reports whether s has a detection of label (any label when negative)
// scoring at least minScore.
func (s *summary) hasDetection(label int32, minScore float32) bool {
	for _, d := range s.dets {
		if (label < 0 || d.label == label) && d.score >= minScore {
			return true
		}
	}
	return false
}

func (s *summary) item(b *batchIndex) galleryItem {
	it := galleryItem{
		ID: s.id, Status: s.status, Code: s.code, Width: int(s.width), Height: int(s.height),
		Overlay: s.overlay != "", Truncated: s.truncated, FinishedAt: s.finished.UTC(), Attempt: int(s.attempt),
		Thumb: apiPrefix + "pictures/" + s.id + "?size=thumb", Picture: apiPrefix + "pictures/" + s.id,
		Detections: make([]detection, len(s.dets)),
	}
	for i, d := range s.dets {
		it.Detections[i] = detection{Label: b.labels[d.label], Score: roundScore(d.score),
			BBox: [4]float64{float64(d.box[0]), float64(d.box[1]), float64(d.box[2]), float64(d.box[3])}}
	}
	return it
}

// roundScore undoes float32's noise in the JSON: 0.93 stays 0.93, not 0.9300000071525574.
func roundScore(f float32) float64 {
	return float64(int64(float64(f)*1e4+0.5)) / 1e4
}

// lookup is the summary of job id's latest result, a copy safe to read unlocked.
func (x *index) lookup(id string) (summary, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s, ok := x.byID[id]
	if !ok || !s.live() {
		return summary{}, false
	}
	return *s, true
}

// batchIDs is the ids of batch's results that failed (or have the status asked).
func (x *index) batchIDs(batch string, status jobs.Status) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	b, ok := x.batches[batch]
	if !ok {
		return nil
	}
	var ids []string
	for _, s := range b.items {
		if s != nil && s.status == status {
			ids = append(ids, s.id)
		}
	}
	return ids
}
