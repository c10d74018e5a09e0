package jobs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/enginetest"
)

// TestJobOutputCannotSquatAnotherJobsResult: the attack of issue #23, defect 2. Jobs whose
// output is, or passes through, the name of another job's result or overlay
// (<results>/victim-1.json/, victim-1.png/, ...) are refused on their first delivery with
// bad_url, their failure stored under the worker's default output and dead-lettered, and
// nothing of that name is made; a job that fails before its output is checked (trailing
// data) stores nothing below it either. The victim then runs and stores its result and
// overlay where they belong.
func TestJobOutputCannotSquatAnotherJobsResult(t *testing.T) {
	f := newFileEnv(t)
	startRunner(t, f.topo, f.store, enginetest.New(), f.runnerConfig("w1"))
	out := f.output()

	squatters := map[string]string{
		"sq-json":      out + "victim-1.json/",
		"sq-png":       out + "victim-1.png/",
		"sq-jpg-noend": out + "victim-1.jpg",
		"sq-job-json":  out + "sub/victim-1.job.json/x/",
		"sq-temp":      out + ".la-tmp-victim-1.json-0123456789abcdef/",
		"sq-s3":        "s3://results/out/victim-1.json/",
	}
	for id, output := range squatters {
		f.publishJob(t, Job{ID: id, Image: f.image, Query: "dog", Overlay: true, Output: output})
	}
	f.publish(t, []byte(`{"id":"sq-trailing","image":"`+f.image+`","query":"dog","output":"`+out+`victim-2.json/"} junk`), "sq-trailing")

	for id, output := range squatters {
		res := f.publishedResult(t, DefaultBatch, id)
		if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeBadURL || res.Attempt != 1 {
			t.Errorf("%s (output %s): status %s error %+v attempt %d; want failed bad_url on the first delivery",
				id, output, res.Status, res.Error, res.Attempt)
			continue
		}
		if !strings.Contains(res.Error.Message, "field output") || !strings.Contains(res.Error.Message, "result or overlay") {
			t.Errorf("%s: message %q; want it to say the output names a result", id, res.Error.Message)
		}
		if res.ResultURL != ResultURL(out, id) || res.OverlayURL != nil {
			t.Errorf("%s: result_url %q overlay %v; want the default output's, no overlay", id, res.ResultURL, res.OverlayURL)
		}
		if rec := f.dlqRecord(t, id); rec == nil || rec.Code != CodeBadURL {
			t.Errorf("%s: dead-letter record %+v; want bad_url", id, rec)
		}
	}
	if res := f.publishedResult(t, DefaultBatch, "sq-trailing"); res.Status != StatusFailed || res.Error.Code != CodeInvalidJob ||
		res.ResultURL != ResultURL(out, "sq-trailing") {
		t.Errorf("sq-trailing: status %s error %+v result_url %q; want invalid_job under the default output", res.Status, res.Error, res.ResultURL)
	}
	for _, name := range []string{"victim-1.json", "victim-1.png", "victim-1.jpg", "sub", "victim-2.json"} {
		if _, err := os.Lstat(filepath.Join(f.results, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was made below the results folder (%v)", name, err)
		}
	}

	for _, id := range []string{"victim-1", "victim-2"} {
		f.publishJob(t, Job{ID: id, Image: f.image, Query: "dog", Overlay: true})
		res := f.publishedResult(t, DefaultBatch, id)
		if res.Status != StatusSucceeded || res.ResultURL != ResultURL(out, id) || res.OverlayURL == nil {
			t.Fatalf("%s: status %s error %+v result_url %q; want it stored with its overlay", id, res.Status, res.Error, res.ResultURL)
		}
		if stored := f.storedResult(t, out, id); stored.ID != id || stored.Status != StatusSucceeded {
			t.Errorf("%s: stored result %s %s", id, stored.ID, stored.Status)
		}
	}
}

// TestCheckOutput: which output prefixes are refused, and that a refusal clears the output
// so the failure is not stored below it.
func TestCheckOutput(t *testing.T) {
	for output, refused := range map[string]bool{
		"":                                   false,
		"file:///data/results/":              false,
		"file:///data/run.2024/":             false,
		"file:///data/jsons/":                false,
		"s3://results/out/":                  false,
		"s3://results.json/out/":             false, // a bucket is not a path segment
		"file:///data/results/victim-1.json": true,
		"file:///data/results/v.json/":       true,
		"file:///data/a.PNG/b/":              true,
		"file:///data/a.jpeg/":               true,
		"s3://results/out/victim-1.jpg/":     true,
		"s3://results/x.job.json/":           true,
		"file:///data/.la-tmp-x/":            true,
		"ftp://elsewhere/victim-1.json/":     false, // unparsable: the store refuses it
	} {
		j := Job{Output: output}
		err := j.checkOutput()
		if (err != nil) != refused {
			t.Errorf("output %q: %v; refused %v", output, err, refused)
		}
		if refused && j.Output != "" {
			t.Errorf("output %q refused but kept", output)
		}
	}
}
