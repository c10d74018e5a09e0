package console_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

type batchJSON struct {
	Batch                                       string
	Total, Succeeded, Failed, Pending, Canceled int
	StartedAt                                   *time.Time `json:"started_at"`
	FinishedAt                                  *time.Time `json:"finished_at"`
	JobsPerS                                    float64    `json:"jobs_per_s"`
	Labels                                      map[string]int
}

type galleryJSON struct {
	Total   int
	Page    int
	PerPage int `json:"per_page"`
	Labels  []string
	Codes   []string
	Items   []struct {
		ID         string
		Status     string
		Code       string
		Width      int
		Height     int
		Thumb      string
		Picture    string
		Detections []struct {
			Label string
			Score float64
			BBox  [4]float64
		}
	}
}

// batchNamed is the batch of the batches page with that name.
func (e *env) batchNamed(t *testing.T, name string) (batchJSON, bool) {
	var all struct{ Batches []batchJSON }
	if code := e.get(t, "/console/api/batches", &all); code != http.StatusOK {
		t.Fatalf("batches: %d", code)
	}
	for _, b := range all.Batches {
		if b.Batch == name {
			return b, true
		}
	}
	return batchJSON{}, false
}

// TestConsoleShowsABatchAndActsOnItsFailures runs the real worker on the simulated chip
// with a batch of jobs of which two name images that are not there, and checks what the
// console's API says of it against the stored results: the counts, the gallery's filters
// and pages, a job, the failures; then the actions' guards (401 and 403), and a replay of
// a failed job, once its image is there, that ends in success.
func TestConsoleShowsABatchAndActsOnItsFailures(t *testing.T) {
	e := newEnv(t, nil)
	e.start(t, nil)

	var ids []string
	for i, img := range []string{"dog.jpg", "person.jpg", "dog.jpg", "person.jpg", "dog.jpg", "person.jpg"} {
		id := fmt.Sprintf("ok-%d", i)
		query := []string{"dog</c>person", "kite</c>tree</c>car"}[i%2]
		e.publish(t, jobs.Job{ID: id, Image: e.image(img), Query: query, Overlay: true, Batch: "b1"})
		ids = append(ids, id)
	}
	missing := filepath.Join(e.inputs, "later.jpg")
	for _, id := range []string{"gone-1", "gone-2"} {
		e.publish(t, jobs.Job{ID: id, Image: "file://" + missing, Query: "dog", Batch: "b1"})
	}
	stored := map[string]jobs.Result{}
	for _, id := range append(ids, "gone-1", "gone-2") {
		stored[id] = e.waitResult(t, id)
	}

	var b1 batchJSON
	testwait.Until(t, time.Minute, "the console to count batch b1", func() bool {
		var ok bool
		b1, ok = e.batchNamed(t, "b1")
		return ok && b1.Total == 8 && b1.Succeeded == 6 && b1.Failed == 2 && b1.Pending == 0
	})
	labels := map[string]int{}
	for _, r := range stored {
		for _, d := range r.Detections {
			labels[d.Label]++
		}
	}
	if b1.StartedAt == nil || b1.FinishedAt == nil || !maps.Equal(b1.Labels, labels) {
		t.Errorf("batch b1: %+v; want start and finish times and the detections per label %v", b1, labels)
	}

	// The gallery's filters, against the stored results.
	wantMatch := func(label string, minScore float64, status, code string) []string {
		var out []string
		for _, id := range append(ids, "gone-1", "gone-2") {
			r := stored[id]
			if (status != "" && string(r.Status) != status) || (code != "" && (r.Error == nil || r.Error.Code != code)) {
				continue
			}
			if label != "" && !slices.ContainsFunc(r.Detections, func(d engine.Detection) bool {
				return d.Label == label && d.Score >= minScore
			}) {
				continue
			}
			out = append(out, id)
		}
		return out
	}
	dogScore := 0.0
	for _, d := range stored["ok-0"].Detections {
		if d.Label == "dog" {
			dogScore = d.Score
		}
	}
	for _, q := range []struct {
		label    string
		minScore float64
		status   string
		code     string
	}{
		{"dog", 0, "", ""}, {"dog", dogScore, "", ""}, {"dog", dogScore + 0.0001, "", ""}, {"tree", 0.5, "", ""},
		{"", 0, "failed", ""}, {"", 0, "", "not_found"}, {"", 0, "succeeded", ""}, {"unicorn", 0, "", ""},
	} {
		path := fmt.Sprintf("/console/api/batches/b1/results?label=%s&min_score=%v&status=%s&code=%s", q.label, q.minScore, q.status, q.code)
		var g galleryJSON
		if code := e.get(t, path, &g); code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		var got []string
		for _, it := range g.Items {
			got = append(got, it.ID)
		}
		want := wantMatch(q.label, q.minScore, q.status, q.code)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) || g.Total != len(want) {
			t.Errorf("%s: total %d items %v, want %v", path, g.Total, got, want)
		}
	}

	// Pages of 3: 3, 3, 2 and none; every item once.
	var paged []string
	for page := 1; page <= 4; page++ {
		var g galleryJSON
		e.get(t, fmt.Sprintf("/console/api/batches/b1/results?per_page=3&page=%d", page), &g)
		if want := []int{3, 3, 2, 0}[page-1]; len(g.Items) != want || g.Total != 8 || g.PerPage != 3 {
			t.Errorf("page %d: %d items of %d (per page %d), want %d of 8", page, len(g.Items), g.Total, g.PerPage, want)
		}
		for _, it := range g.Items {
			paged = append(paged, it.ID)
			if it.ID == "ok-0" {
				r := stored["ok-0"]
				if it.Width != r.Width || it.Height != r.Height || len(it.Detections) != len(r.Detections) ||
					it.Detections[0].BBox[2] != float64(float32(r.Detections[0].Box[2])) || it.Thumb != "/console/api/pictures/ok-0?size=thumb" {
					t.Errorf("gallery item ok-0: %+v, want the stored result's size and boxes %+v", it, r.Detections)
				}
			}
		}
	}
	slices.Sort(paged)
	if len(slices.Compact(paged)) != 8 {
		t.Errorf("the pages listed %v, want the 8 jobs once each", paged)
	}
	for _, bad := range []string{"per_page=0", "per_page=501", "page=0", "min_score=2", "status=weird"} {
		if code := e.get(t, "/console/api/batches/b1/results?"+bad, nil); code != http.StatusBadRequest {
			t.Errorf("results?%s: %d, want 400", bad, code)
		}
	}
	if code := e.get(t, "/console/api/batches/nosuch/results", nil); code != http.StatusNotFound {
		t.Errorf("an unknown batch's results: %d, want 404", code)
	}

	// One job: its stored result verbatim.
	var job struct {
		ID         string
		Result     json.RawMessage
		DeadLetter *jobs.DLQRecord `json:"dead_letter"`
		Attempts   int
	}
	if code := e.get(t, "/console/api/jobs/ok-1", &job); code != http.StatusOK {
		t.Fatalf("job ok-1: %d", code)
	}
	_, raw, _ := e.storedResult(t, "ok-1")
	if !jsonEqual(t, job.Result, raw) || job.DeadLetter != nil || job.Attempts != 1 {
		t.Errorf("job ok-1: result %s dead letter %v attempts %d; want the stored result, no record, 1 attempt", job.Result, job.DeadLetter, job.Attempts)
	}
	if code := e.get(t, "/console/api/jobs/gone-1", &job); code != http.StatusOK || job.DeadLetter == nil || job.DeadLetter.Code != "not_found" {
		t.Errorf("job gone-1: %d, dead letter %+v; want its not_found record", code, job.DeadLetter)
	}
	for path, want := range map[string]int{"/console/api/jobs/never-seen": 404, "/console/api/jobs/a.b": 400, "/console/api/nothing": 404} {
		if code := e.get(t, path, nil); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}

	// The failures, grouped.
	var fails struct {
		Groups []struct {
			Code, Batch string
			Count       int
		}
		Items []struct{ ID, Batch, Code, Message string }
	}
	e.get(t, "/console/api/failures?batch=b1", &fails)
	if len(fails.Groups) != 1 || fails.Groups[0].Code != "not_found" || fails.Groups[0].Count != 2 || len(fails.Items) != 2 {
		t.Errorf("failures of b1: %+v", fails)
	}

	// The overview: this worker alive, two failures by code.
	var ov struct {
		Workers []struct {
			ID, Engine, Model string
			LastSeen          time.Time `json:"last_seen"`
		}
		Errors []struct {
			Code  string
			Count int
		}
		SucceededPerMin float64 `json:"succeeded_per_min"`
	}
	e.get(t, "/console/api/overview", &ov)
	if len(ov.Workers) != 1 || ov.Workers[0].ID != "w1" || ov.Workers[0].Engine != "sim" || time.Since(ov.Workers[0].LastSeen) > time.Minute {
		t.Errorf("overview workers: %+v, want w1 on sim, seen just now", ov.Workers)
	}
	if len(ov.Errors) != 1 || ov.Errors[0].Code != "not_found" || ov.Errors[0].Count != 2 || ov.SucceededPerMin != 6 {
		t.Errorf("overview errors %+v, succeeded per minute %v; want 2 not_found, 6", ov.Errors, ov.SucceededPerMin)
	}

	// The actions' guards.
	replay := map[string]any{"ids": []string{"gone-1"}}
	if code, body := e.post(t, "/console/api/replay", replay, nil); code != http.StatusForbidden {
		t.Errorf("replay without a session: %d %s, want 403", code, body)
	}
	if code, body := e.post(t, "/console/api/session", map[string]string{"token": "wrong-token-0123456789"}, nil); code != http.StatusUnauthorized {
		t.Errorf("sign-in with a wrong token: %d %s, want 401", code, body)
	}
	var sess struct{ Actions bool }
	if e.get(t, "/console/api/session", &sess); sess.Actions {
		t.Error("GET session says actions are allowed before signing in")
	}
	csrf := e.signIn(t)
	if e.get(t, "/console/api/session", &sess); !sess.Actions {
		t.Error("GET session says no actions after signing in")
	}
	if code, body := e.post(t, "/console/api/replay", replay, nil); code != http.StatusForbidden {
		t.Errorf("replay without the CSRF header: %d %s, want 403", code, body)
	}
	if code, body := e.post(t, "/console/api/replay", replay, map[string]string{"X-CSRF-Token": "not-it"}); code != http.StatusForbidden {
		t.Errorf("replay with a wrong CSRF header: %d %s, want 403", code, body)
	}
	if code, body := e.post(t, "/console/api/replay", replay, map[string]string{"X-CSRF-Token": csrf, "Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Errorf("a cross-origin replay: %d %s, want 403", code, body)
	}
	if _, _, ok := e.storedResult(t, "gone-1"); !ok {
		t.Fatal("gone-1's result is gone")
	}

	// Fix the input, replay: the job succeeds, the console shows it.
	img, err := os.ReadFile(filepath.Join(e.images, "dog.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(missing, img, 0o644); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{"X-CSRF-Token": csrf, "Origin": e.base}
	code, body := e.post(t, "/console/api/replay", map[string]any{"ids": []string{"gone-1", "ok-0"}}, headers)
	var rep struct {
		Replayed int
		Skipped  []struct{ ID, Reason string }
	}
	if err := json.Unmarshal(body, &rep); err != nil || code != http.StatusOK || rep.Replayed != 1 || len(rep.Skipped) != 1 || rep.Skipped[0].ID != "ok-0" {
		t.Fatalf("replay: %d %s; want gone-1 replayed, ok-0 skipped", code, body)
	}
	testwait.Until(t, time.Minute, "gone-1 to succeed after its replay", func() bool {
		r, _, _ := e.storedResult(t, "gone-1")
		return r.Status == jobs.StatusSucceeded
	})
	testwait.Until(t, time.Minute, "the console to show gone-1 succeeded", func() bool {
		var g galleryJSON
		e.get(t, "/console/api/batches/b1/results?status=failed", &g)
		b, _ := e.batchNamed(t, "b1")
		return g.Total == 1 && g.Items[0].ID == "gone-2" && b.Succeeded == 7 && b.Failed == 1 && b.Total == 8
	})
	e.get(t, "/console/api/failures", &fails)
	if len(fails.Items) != 1 || fails.Items[0].ID != "gone-2" {
		t.Errorf("failures after the replay: %+v, want gone-2 alone", fails.Items)
	}
	// The whole batch's failures: gone-2 is replayed (its image is there now too).
	code, body = e.post(t, "/console/api/replay", map[string]any{"batch": "b1"}, headers)
	if err := json.Unmarshal(body, &rep); err != nil || code != http.StatusOK || rep.Replayed != 1 {
		t.Fatalf("replay of batch b1: %d %s; want gone-2 replayed", code, body)
	}
	testwait.Until(t, time.Minute, "gone-2 to succeed after its batch's replay", func() bool {
		r, _, _ := e.storedResult(t, "gone-2")
		return r.Status == jobs.StatusSucceeded
	})

	// /predict's own answers are unchanged beside the console.
	for path, want := range map[string]int{"/predict": 405, "/nowhere": 404, "/console": http.StatusTemporaryRedirect} {
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(e.base + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, 4096)
	n, _ := resp.Body.Read(page)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page[:n]), "<html") || strings.Contains(string(page[:n]), testToken) {
		t.Errorf("GET /console/: %d %q; want the page, without the token", resp.StatusCode, page[:n])
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}

// TestConsoleCancelsAPendingJob: with the chip held by one job, a job queued behind it is
// canceled from the console (by id, then a batch by name) and ends with a canceled
// result once the chip is free, without running.
func TestConsoleCancelsAPendingJob(t *testing.T) {
	e := newEnv(t, map[string]string{"LA_ENGINE": "cpu"})
	started, release := make(chan string, 16), make(chan struct{})
	eng := enginetest.New()
	eng.Started, eng.Release = started, release
	e.start(t, fixedOpener(eng))

	e.publish(t, jobs.Job{ID: "holder", Image: e.image("dog.jpg"), Query: "block", Batch: "hold"})
	if q := <-started; q != "block" {
		t.Fatalf("first job run: %q", q)
	}
	e.publish(t, jobs.Job{ID: "waiting-1", Image: e.image("dog.jpg"), Query: "w1", Batch: "later"})
	e.publish(t, jobs.Job{ID: "waiting-2", Image: e.image("dog.jpg"), Query: "w2", Batch: "later2"})
	testwait.Until(t, time.Minute, "the console to see batch later pending", func() bool {
		b, ok := e.batchNamed(t, "later")
		return ok && b.Pending == 1 && b.Total == 1
	})
	csrf := e.signIn(t)
	headers := map[string]string{"X-CSRF-Token": csrf}
	code, body := e.post(t, "/console/api/cancel", map[string]any{"ids": []string{"waiting-1"}}, headers)
	if code != http.StatusOK || !strings.Contains(string(body), `"canceled":1`) {
		t.Fatalf("cancel waiting-1: %d %s", code, body)
	}
	code, body = e.post(t, "/console/api/cancel", map[string]any{"batch": "later2"}, headers)
	if code != http.StatusOK || !strings.Contains(string(body), `"canceled":1`) {
		t.Fatalf("cancel batch later2: %d %s", code, body)
	}
	if code, _ := e.post(t, "/console/api/cancel", map[string]any{"ids": []string{"x"}, "batch": "y"}, headers); code != http.StatusBadRequest {
		t.Errorf("cancel naming ids and a batch: %d, want 400", code)
	}
	close(release)
	for _, id := range []string{"waiting-1", "waiting-2"} {
		r := e.waitResult(t, id)
		if r.Status != jobs.StatusCanceled || eng.Calls(strings.Replace(id, "waiting-", "w", 1)) != 0 {
			t.Errorf("%s: status %s, ran %d times; want canceled without running", id, r.Status, eng.Calls(id))
		}
	}
	if r := e.waitResult(t, "holder"); r.Status != jobs.StatusSucceeded {
		t.Errorf("holder: %s", r.Status)
	}
	testwait.Until(t, time.Minute, "the console to count the cancel", func() bool {
		b, ok := e.batchNamed(t, "later")
		return ok && b.Canceled == 1 && b.Pending == 0
	})
}

// TestConsoleOffAndExposure: LA_CONSOLE=off serves nothing under /console/ (404, the
// contract's answer); a console asked for on an address that is not loopback without a
// token refuses the configuration, naming both variables; auto leaves it off there.
func TestConsoleOffAndExposure(t *testing.T) {
	e := newEnv(t, map[string]string{"LA_CONSOLE": "off", "LA_ENGINE": "cpu"})
	eng := enginetest.New()
	e.run(t, fixedOpener(eng), "/readyz")
	for _, path := range []string{"/console/", "/console/api/overview"} {
		resp, err := http.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("LA_CONSOLE=off: GET %s: %d, want 404", path, resp.StatusCode)
		}
	}

	for _, tc := range []struct {
		vars    map[string]string
		refused bool
	}{
		{map[string]string{"LA_CONSOLE": "on", "LA_HTTP_ADDR": "0.0.0.0:20000", "LA_CONSOLE_TOKEN": ""}, true},
		{map[string]string{"LA_CONSOLE": "on", "LA_HTTP_ADDR": ":20000", "LA_CONSOLE_TOKEN": testToken}, false},
		{map[string]string{"LA_CONSOLE": "auto", "LA_HTTP_ADDR": ":20000", "LA_CONSOLE_TOKEN": ""}, false},
		{map[string]string{"LA_CONSOLE": "on", "LA_HTTP_ADDR": "127.0.0.1:20000", "LA_CONSOLE_TOKEN": ""}, false},
	} {
		for k, v := range tc.vars {
			t.Setenv(k, v)
		}
		var cfg config.Worker
		err := envconfig.Process("", &cfg)
		if err == nil {
			err = cfg.Finish(t.TempDir())
		}
		if tc.refused != (err != nil) || (err != nil && !(strings.Contains(err.Error(), "LA_CONSOLE_TOKEN") && strings.Contains(err.Error(), "LA_CONSOLE=off"))) {
			t.Errorf("%v: %v; want refused %v, naming LA_CONSOLE_TOKEN and LA_CONSOLE=off", tc.vars, err, tc.refused)
		}
		if err == nil && tc.vars["LA_CONSOLE"] == "auto" && cfg.Console.Served(config.Loopback(cfg.HTTP.Addr)) {
			t.Errorf("%v: auto serves the console off loopback without a token", tc.vars)
		}
	}
}
