package jobs

import (
	"strings"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/storage"
)

// checkOutput refuses a job's output prefix that is, or passes through, a name shaped like
// a file a worker writes for a job (<id>.json, <id>.png, <id>.jpg, <id>.job.json, a
// temporary .la-tmp-* file): storing below file://<results>/victim-1.json/ would make a
// folder where the result of job victim-1 goes, and that job would fail. The refusal is
// bad_url, and the output is cleared so that the failure itself is stored under the
// worker's default output, not below the refused prefix. An output that does not parse is
// left to the store, which can never write there.
func (j *Job) checkOutput() error {
	name := squattingName(j.Output)
	if name == "" {
		return nil
	}
	output := j.Output
	j.Output = ""
	return engine.InputErrorf(CodeBadURL, "field output: %q has the name %q, which a worker may give a job's "+
		"result or overlay (<id>.json, <id>.png, <id>.jpg, <id>.job.json): an output may not be or contain one",
		output, name)
}

// squattingName is the first segment of the output prefix's path or key shaped like a file
// a worker writes (storage.FileLikeName), or "" when there is none or output is empty or
// unparsable.
func squattingName(output string) string {
	if output == "" {
		return ""
	}
	loc, err := storage.ParsePrefix(output)
	if err != nil {
		return ""
	}
	rest := loc.Key
	if loc.Scheme == storage.SchemeFile {
		rest = loc.Path
	}
	for _, seg := range strings.Split(rest, "/") {
		if storage.FileLikeName(seg) {
			return seg
		}
	}
	return ""
}
