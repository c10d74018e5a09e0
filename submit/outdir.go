package submit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"sync"

	"github.com/locateanything/detect/jobs"
)

// Files in the output directory.
const (
	ResultsFile = "results.jsonl"        // one Row per finished job
	StateFile   = "submit-state.jsonl"   // the batch, then one line per published job
	COCOFile    = "detections.coco.json" // with --coco
	FailedFile  = "failed.jsonl"         // the set's jobs that did not succeed: id, source, file, status, code, message
	OverlaysDir = "overlays"             // with --overlay: the image's path below its input, as .png or .jpg
)

// Row is one line of results.jsonl: the worker's result plus the input it came from and
// where its files are in the output directory.
type Row struct {
	Source string `json:"source"` // the path, URL or manifest line the job was made from
	// File is the image's path below its input (directory, glob, prefix or manifest
	// folder), which the output directory mirrors.
	File string `json:"file,omitempty"`
	// JSONFile and OverlayFile are the image's result JSON and overlay picture, relative to
	// the output directory: results/cam04/000123.json, overlays/cam04/000123.png. Rows an
	// older submit wrote have neither (their overlays are overlays/<id>.png).
	JSONFile    string `json:"json_file,omitempty"`
	OverlayFile string `json:"overlay_file,omitempty"`
	jobs.Result
}

// stateHeader is the first line of the state file.
type stateHeader struct {
	Batch string `json:"batch"`
	Class string `json:"class"`
}

// stateRecord is every later line: a job JetStream acknowledged (with the input it was
// made from and the job message itself), or a local image hashed.
type stateRecord struct {
	Published string `json:"published,omitempty"`
	Source    string `json:"source,omitempty"`
	// Job is the job as published: what `submit retry --canceled/--expired` publishes
	// again, since the queue keeps no message of a job that ended. Lines an older submit
	// wrote have none.
	Job *jobs.Job `json:"job,omitempty"`
	// Duplicate: JetStream acknowledged the publish as a duplicate, so the stream kept
	// another message with this id (an earlier publish, maybe another producer's), not
	// this one; the line then carries no Job, and retry skips the id.
	Duplicate bool        `json:"duplicate,omitempty"`
	File      *fileRecord `json:"file,omitempty"`
}

// fileRecord remembers the hash of a local image and where the worker reads it, so a rerun
// need not read the file again while its size and modification time are unchanged (the
// rule make and rsync go by).
type fileRecord struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
	URL     string `json:"url"`
}

// outDir is the output directory of one batch: it holds the results written so far and
// the record of what was published, which together make a rerun resume.
type outDir struct {
	path string

	mu       sync.Mutex
	results  *os.File
	resultsW *bufio.Writer
	state    *os.File
	stateW   *bufio.Writer
}

// outState is what an earlier run left in the output directory.
type outState struct {
	Header    stateHeader
	HasHeader bool
	Published map[string]bool
	Sources   map[string]string    // the input of each published job, by id, where recorded
	Jobs      map[string]*jobs.Job // each published job as published, by id, where recorded
	// Duplicates are the ids whose latest publish JetStream acknowledged as a duplicate:
	// what the stream holds under them is not known here.
	Duplicates map[string]bool
	Files      map[string]fileRecord // by path
	Done       map[string]Row        // results already written, by job id
}

// openOutDir creates dir if needed and reads what earlier runs left there. A line cut short
// by a crash at the end of either file is dropped (and cut off the file), since the run that
// wrote it never got to rely on it; a bad line anywhere else is an error.
func openOutDir(dir string) (*outDir, *outState, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("output directory: %w", err)
	}
	st, err := readOutState(dir, true)
	if err != nil {
		return nil, nil, err
	}
	resultsPath, statePath := filepath.Join(dir, ResultsFile), filepath.Join(dir, StateFile)
	o := &outDir{path: dir}
	if o.results, err = os.OpenFile(resultsPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, nil, fmt.Errorf("output directory: %w", err)
	}
	if o.state, err = os.OpenFile(statePath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		o.results.Close()
		return nil, nil, fmt.Errorf("output directory: %w", err)
	}
	o.resultsW = bufio.NewWriter(o.results)
	o.stateW = bufio.NewWriter(o.state)
	return o, st, nil
}

// readOutState reads what runs left in dir (nothing when it does not exist). With repair,
// a last line cut short by a crash is cut off its file; without, dir is only read (a dry
// run, status) and such a line is skipped.
func readOutState(dir string, repair bool) (*outState, error) {
	st := &outState{Published: map[string]bool{}, Sources: map[string]string{}, Jobs: map[string]*jobs.Job{}, Duplicates: map[string]bool{}, Files: map[string]fileRecord{}, Done: map[string]Row{}}
	resultsPath := filepath.Join(dir, ResultsFile)
	err := scanJSONLines(resultsPath, repair, func(n int, line []byte) error {
		var r Row
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if !validRow(r) {
			return fmt.Errorf("row without a valid job id, or with a file outside the output directory")
		}
		st.Done[r.ID] = r // a later row (a replayed job's new result) replaces an earlier one
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = scanJSONLines(filepath.Join(dir, StateFile), repair, func(n int, line []byte) error {
		if n == 1 {
			if err := json.Unmarshal(line, &st.Header); err != nil || st.Header.Batch == "" {
				return fmt.Errorf("first line is not the batch header")
			}
			st.HasHeader = true
			return nil
		}
		var rec stateRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return err
		}
		switch {
		case rec.Published != "":
			st.Published[rec.Published] = true
			if rec.Source != "" {
				st.Sources[rec.Published] = rec.Source
			}
			switch {
			case rec.Duplicate:
				delete(st.Jobs, rec.Published)
				st.Duplicates[rec.Published] = true
			case rec.Job != nil && rec.Job.ID == rec.Published:
				st.Jobs[rec.Published] = rec.Job
				delete(st.Duplicates, rec.Published)
			}
		case rec.File != nil:
			st.Files[rec.File.Path] = *rec.File
		default:
			return fmt.Errorf("neither a published job nor a file")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// readJSONLines calls fn for every line of path (numbered from 1). A missing file has no
// lines. A last line without its newline is a write cut short by a crash: it is cut off.
func readJSONLines(path string, fn func(n int, line []byte) error) error {
	return scanJSONLines(path, true, fn)
}

// scanJSONLines is readJSONLines; without repair an unfinished last line is skipped and
// the file left as it is.
func scanJSONLines(path string, repair bool, fn func(n int, line []byte) error) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if end := bytes.LastIndexByte(data, '\n') + 1; end < len(data) {
		if repair {
			if err := os.Truncate(path, int64(end)); err != nil {
				return fmt.Errorf("cut the unfinished last line off %s: %w", path, err)
			}
		}
		data = data[:end]
	}
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		line := bytes.TrimSpace(data[:i])
		data = data[i+1:]
		if len(line) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	return nil
}

// writeHeader starts a new state file.
func (o *outDir) writeHeader(h stateHeader) error {
	return o.appendLine(o.stateW, h)
}

// markPublished records that JetStream acknowledged job, made from source. dup: the ack
// said Duplicate, so the stream holds another message with job's id, not job; the line
// then records the id as published (a rerun does not publish it again) but not the job,
// which is not what runs under that id.
func (o *outDir) markPublished(job *jobs.Job, source string, dup bool) error {
	if dup {
		return o.appendLine(o.stateW, stateRecord{Published: job.ID, Source: source, Duplicate: true})
	}
	return o.appendLine(o.stateW, stateRecord{Published: job.ID, Source: source, Job: job})
}

// recordFile remembers a hashed local image.
func (o *outDir) recordFile(f fileRecord) error {
	return o.appendLine(o.stateW, stateRecord{File: &f})
}

// writeRow appends a finished job to results.jsonl.
func (o *outDir) writeRow(r Row) error {
	return o.appendLine(o.resultsW, r)
}

func (o *outDir) appendLine(w *bufio.Writer, v any) error {
	// Plain UTF-8, < > & as they are: grep 'person</c>car' results.jsonl finds the line.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // one line, with its newline
		return fmt.Errorf("encode output line: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write %s: %w", o.path, err)
	}
	return nil
}

// sync makes everything written so far durable: results first, so a crash between the two
// can only leave a published record without its row (collected again on rerun), never the
// other way round.
func (o *outDir) sync() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range []struct {
		w *bufio.Writer
		f *os.File
	}{{o.resultsW, o.results}, {o.stateW, o.state}} {
		if err := f.w.Flush(); err != nil {
			return fmt.Errorf("write %s: %w", f.f.Name(), err)
		}
		if err := f.f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", f.f.Name(), err)
		}
	}
	return nil
}

// close syncs and closes both files.
func (o *outDir) close() error {
	err := o.sync()
	if cerr := o.results.Close(); err == nil {
		err = cerr
	}
	if cerr := o.state.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadRows reads the rows of results.jsonl in dir, one per job in the order of their first
// row; a job's later row (its result after a replay) replaces the earlier one.
func ReadRows(dir string) ([]Row, error) {
	var rows []Row
	index := map[string]int{}
	err := readJSONLines(filepath.Join(dir, ResultsFile), func(_ int, line []byte) error {
		var r Row
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if i, ok := index[r.ID]; ok {
			rows[i] = r
			return nil
		}
		index[r.ID] = len(rows)
		rows = append(rows, r)
		return nil
	})
	return rows, err
}
