package weights

import (
	"github.com/locateanything/detect/internal/flock"

	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	userAgent = "locateanything-detect/weights"
	// stallTimeout ends a transfer that has received nothing for this long; the attempt
	// counts as a failure and the next one resumes where it stopped.
	stallTimeout = 60 * time.Second
	// maxFailures is how many attempts in a row may fail without receiving a byte.
	maxFailures = 4
	// maxRedirects bounds the metadata lookup's hops (a renamed repository redirects).
	maxRedirects = 5
)

// Hub ETags name the blobs: the sha256 of the content for LFS files, the git blob sha1 for
// small files kept in git.
var (
	sha256ETag = regexp.MustCompile(`^[0-9a-f]{64}$`)
	gitETag    = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// hub talks to the Hugging Face Hub (or a mirror at Options.Endpoint) for one download.
type hub struct {
	opts     Options
	client   *http.Client // follows redirects, for content
	metadata *http.Client // stops at the first answer, to read the Hub's own headers
}

func newHub(opts Options) *hub {
	client := opts.Client
	if client == nil {
		client = &http.Client{}
	}
	metadata := *client
	metadata.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hub{opts: opts, client: client, metadata: &metadata}
}

func newStatusError(u string, code int) *statusError {
	e := &statusError{url: u, code: code}
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		e.hint = "the Hub refused access: set HF_TOKEN to a token that may read this repository"
	case http.StatusNotFound:
		e.hint = "no such repository, revision or file; a gated or private repository also answers 404 without HF_TOKEN"
	}
	return e
}

// request builds a request; the token goes only to the Hub endpoint (Go's client keeps it
// on redirects within the same domain, such as the Hub's own CDN, and drops it elsewhere).
func (h *hub) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept-Encoding", "identity") // sizes and hashes are of the raw bytes
	if h.opts.Token != "" && strings.HasPrefix(u, h.opts.endpoint()+"/") {
		req.Header.Set("Authorization", "Bearer "+h.opts.Token)
	}
	return req, nil
}

// revisionInfo is the part of the Hub's model API answer the download needs.
type revisionInfo struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

// listFiles asks the Hub API for the revision's commit and file list.
func (h *hub) listFiles(ctx context.Context) (commit string, files []string, err error) {
	u := h.opts.endpoint() + "/api/models/" + h.opts.repo() + "/revision/" + url.PathEscape(h.opts.revision())
	req, err := h.request(ctx, http.MethodGet, u)
	if err != nil {
		return "", nil, err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("list files: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("list files: %w", newStatusError(u, resp.StatusCode))
	}
	var info revisionInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&info); err != nil {
		return "", nil, fmt.Errorf("list files: %s: %w", u, err)
	}
	if !commitHash.MatchString(info.SHA) {
		return "", nil, fmt.Errorf("list files: %s: answer has no commit hash (sha %q)", u, info.SHA)
	}
	for _, s := range info.Siblings {
		if !filepath.IsLocal(s.RFilename) || strings.Contains(s.RFilename, `\`) {
			return "", nil, fmt.Errorf("list files: %s: refusing file name %q", u, s.RFilename)
		}
		files = append(files, s.RFilename)
	}
	if len(files) == 0 {
		return "", nil, fmt.Errorf("list files: %s: the revision has no files", u)
	}
	return info.SHA, files, nil
}

// downloadOrder sorts the files, config.json last: a snapshot counts as complete once
// config.json is there (checkSnapshot), so it must not appear before the rest.
func downloadOrder(files []string) []string {
	out := append([]string(nil), files...)
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i] == "config.json") != (out[j] == "config.json") {
			return out[j] == "config.json"
		}
		return out[i] < out[j]
	})
	return out
}

// download fetches every file of the revision into the cache and returns the snapshot.
func download(ctx context.Context, opts Options) (string, error) {
	h := newHub(opts)
	commit, files, err := h.listFiles(ctx)
	if err != nil {
		return "", err
	}
	if commitHash.MatchString(opts.revision()) && commit != opts.revision() {
		return "", fmt.Errorf("asked for commit %s, the Hub answered %s", opts.revision(), commit)
	}
	snapshot := filepath.Join(opts.repoDir(), "snapshots", commit)
	for _, name := range downloadOrder(files) {
		if err := h.fetchFile(ctx, commit, snapshot, name); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
	}
	if opts.revision() != commit {
		ref := filepath.Join(opts.repoDir(), "refs", opts.revision())
		if err := writeFileAtomic(ref, []byte(commit)); err != nil {
			return "", fmt.Errorf("record ref %s: %w", opts.revision(), err)
		}
	}
	if err := checkSnapshot(snapshot); err != nil {
		return "", fmt.Errorf("downloaded revision is not a usable checkpoint: %w", err)
	}
	return snapshot, nil
}

// fileMeta is what the Hub says about one file before it is fetched.
type fileMeta struct {
	etag string // sha256 (LFS) or git sha1, normalized
	size int64  // -1 when the Hub does not say
}

func (m fileMeta) isLFS() bool { return sha256ETag.MatchString(m.etag) }

// resolveURL is the file's download address at the commit.
func (h *hub) resolveURL(commit, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return h.opts.endpoint() + "/" + h.opts.repo() + "/resolve/" + commit + "/" + strings.Join(parts, "/")
}

// fetchFile makes snapshot/name a link to the verified blob, downloading the blob unless the
// cache has it already. A lock file per blob (the layout huggingface_hub uses) keeps two
// processes sharing the cache from writing the same partial file.
func (h *hub) fetchFile(ctx context.Context, commit, snapshot, name string) error {
	u := h.resolveURL(commit, name)
	meta, err := h.head(ctx, u)
	if err != nil {
		return err
	}
	blob := filepath.Join(h.opts.repoDir(), "blobs", meta.etag)
	link := filepath.Join(snapshot, filepath.FromSlash(name))
	if hasSize(blob, meta.size) {
		size := fileSize(blob)
		h.report(name, size, size)
		return linkBlob(blob, link)
	}
	lockPath := filepath.Join(h.opts.cacheDir(), ".locks", filepath.Base(h.opts.repoDir()), meta.etag+".lock")
	unlock, err := flock.Lock(ctx, lockPath, lockPoll)
	if err != nil {
		return fmt.Errorf("waiting for another download of the same file: %w", err)
	}
	defer unlock()
	if !hasSize(blob, meta.size) { // another process may have finished it while we waited
		if err := h.fetchBlob(ctx, u, name, blob, meta); err != nil {
			return err
		}
	}
	return linkBlob(blob, link)
}

// head reads the file's ETag and size from the Hub's own answer, before any CDN redirect:
// X-Linked-Etag and X-Linked-Size describe an LFS file, ETag and Content-Length a small one.
func (h *hub) head(ctx context.Context, u string) (fileMeta, error) {
	for range maxRedirects {
		req, err := h.request(ctx, http.MethodHead, u)
		if err != nil {
			return fileMeta{}, err
		}
		resp, err := h.metadata.Do(req)
		if err != nil {
			return fileMeta{}, fmt.Errorf("metadata: %w", err)
		}
		resp.Body.Close()
		linked := resp.Header.Get("X-Linked-Etag")
		isRedirect := resp.StatusCode >= 300 && resp.StatusCode < 400
		if isRedirect && linked == "" {
			next, err := resp.Location() // not the CDN: a renamed repository or file
			if err != nil {
				return fileMeta{}, fmt.Errorf("metadata: %s: redirect without a location: %w", u, err)
			}
			u = next.String()
			continue
		}
		if resp.StatusCode != http.StatusOK && !isRedirect {
			return fileMeta{}, fmt.Errorf("metadata: %w", newStatusError(u, resp.StatusCode))
		}
		meta := fileMeta{etag: normalizeETag(linked), size: -1}
		if meta.etag == "" {
			meta.etag = normalizeETag(resp.Header.Get("ETag"))
		}
		if s := resp.Header.Get("X-Linked-Size"); s != "" {
			if meta.size, err = strconv.ParseInt(s, 10, 64); err != nil || meta.size < 0 {
				return fileMeta{}, fmt.Errorf("metadata: %s: bad X-Linked-Size %q", u, s)
			}
		} else if !isRedirect && resp.ContentLength >= 0 {
			meta.size = resp.ContentLength
		}
		if !sha256ETag.MatchString(meta.etag) && !gitETag.MatchString(meta.etag) {
			return fileMeta{}, fmt.Errorf("metadata: %s: ETag %q is neither a sha256 nor a git sha1; cannot name or check the file", u, meta.etag)
		}
		return meta, nil
	}
	return fileMeta{}, fmt.Errorf("metadata: %s: more than %d redirects", u, maxRedirects)
}

// normalizeETag strips the weak marker and the quotes: W/"abc" -> abc.
func normalizeETag(s string) string {
	return strings.Trim(strings.TrimPrefix(strings.TrimSpace(s), "W/"), `"`)
}

// fetchBlob downloads into blob+".incomplete", resuming what an earlier attempt (or an
// earlier run) left there, then checks it and renames it to blob. An attempt that received
// bytes is followed at once by another; attempts that receive nothing back off, and
// maxFailures of them in a row end the download.
func (h *hub) fetchBlob(ctx context.Context, u, name, blob string, meta fileMeta) error {
	partial := blob + ".incomplete"
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return err
	}
	failures := 0
	for {
		before := fileSize(partial)
		err := h.fetchOnce(ctx, u, name, partial, meta)
		if err == nil {
			break
		}
		var se *statusError
		if ctx.Err() != nil || errors.As(err, &se) && !se.retryable() {
			return err
		}
		if fileSize(partial) > before {
			failures = 0
			continue
		}
		failures++
		if failures >= maxFailures {
			return fmt.Errorf("%d attempts in a row received nothing: %w", failures, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(1<<(failures-1)) * time.Second):
		}
	}
	if err := verify(partial, meta); err != nil {
		os.Remove(partial) // never leave bad bytes where a resume would build on them
		return err
	}
	return os.Rename(partial, blob)
}

// fetchOnce makes one GET, asking for the bytes after those already in partial.
func (h *hub) fetchOnce(ctx context.Context, u, name, partial string, meta fileMeta) error {
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	offset, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if meta.size >= 0 && offset > meta.size {
		offset = 0 // longer than the file: not a prefix of it
	}
	if meta.size >= 0 && offset == meta.size {
		return nil
	}

	// A watchdog cancels the request when no byte has arrived for stallTimeout.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stalled := errors.New("no data for " + stallTimeout.String())
	watchdog := time.AfterFunc(stallTimeout, func() { cancel(stalled) })
	defer watchdog.Stop()
	req, err := h.request(ctx, http.MethodGet, u)
	if err != nil {
		return err
	}
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if context.Cause(ctx) == stalled {
			return fmt.Errorf("%s: %w", u, stalled)
		}
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-", offset)) {
			return fmt.Errorf("%s: asked for bytes from %d, got range %q", u, offset, resp.Header.Get("Content-Range"))
		}
	case resp.StatusCode == http.StatusOK:
		offset = 0 // the server sends the whole file
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		offset = 0
		if err := f.Truncate(0); err != nil {
			return err
		}
		return fmt.Errorf("%s: partial file does not fit the file on the server; starting over", u)
	default:
		return newStatusError(u, resp.StatusCode)
	}
	if err := f.Truncate(offset); err != nil {
		return err
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err
	}

	progress := &progressWriter{report: h.report, name: name, done: offset, total: meta.size, onWrite: func() { watchdog.Reset(stallTimeout) }}
	progress.start()
	if _, err := io.Copy(io.MultiWriter(f, progress), resp.Body); err != nil {
		if cause := context.Cause(ctx); cause == stalled {
			return fmt.Errorf("%s: %w", u, stalled)
		}
		return fmt.Errorf("%s: %w", u, err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	progress.finish()
	return nil
}

// verify checks the finished file: its size when the Hub gave one, and its sha256 for LFS
// files. Small files carry a git sha1 ETag, which is not a plain hash of the bytes; for them
// the size is the only check.
func verify(p string, meta fileMeta) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	hash := sha256.New()
	n, err := io.Copy(hash, f)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if meta.size >= 0 && n != meta.size {
		return fmt.Errorf("downloaded %d bytes, the Hub says %d; the partial file was removed", n, meta.size)
	}
	if meta.isLFS() {
		if got := hex.EncodeToString(hash.Sum(nil)); got != meta.etag {
			return fmt.Errorf("sha256 %s does not match the Hub's %s; the file was removed", got, meta.etag)
		}
	}
	return nil
}

func (h *hub) report(name string, done, total int64) {
	if h.opts.Progress != nil {
		h.opts.Progress(name, done, total)
	}
}

// progressWriter counts bytes and reports about every percent (or 64 MiB when the total is
// unknown), so a log line per report stays readable for a 4 GB shard.
type progressWriter struct {
	report      func(name string, done, total int64)
	name        string
	done, total int64
	last        int64
	onWrite     func()
}

func (p *progressWriter) step() int64 {
	if p.total > 0 {
		return max(p.total/100, 1)
	}
	return 64 << 20
}

func (p *progressWriter) start() {
	p.last = p.done
	p.report(p.name, p.done, p.total)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	p.onWrite()
	if p.done-p.last >= p.step() && p.done != p.total {
		p.last = p.done
		p.report(p.name, p.done, p.total)
	}
	return len(b), nil
}

func (p *progressWriter) finish() { p.report(p.name, p.done, p.done) }

func fileSize(p string) int64 {
	info, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return info.Size()
}

// hasSize reports whether p is a file of the given size (any size when size < 0).
func hasSize(p string, size int64) bool {
	info, err := os.Stat(p)
	return err == nil && info.Mode().IsRegular() && (size < 0 || info.Size() == size)
}

// linkBlob points link at blob with a relative symbolic link, as the Hugging Face cache
// does, replacing whatever link was there.
func linkBlob(blob, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	target, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return err
	}
	tmp := link + ".tmp-" + randomSuffix()
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeFileAtomic writes data to p through a temporary file and a rename.
func writeFileAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp-" + randomSuffix()
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}

// lockPoll is how often a process waiting for another's download of the same file
// tries the lock again (huggingface_hub takes the same lock on the same path).
const lockPoll = 500 * time.Millisecond
