// Package weights finds the LocateAnything-3B checkpoint directory the way the upstream Python server (docs/background.md, "Knobs")
// does, and downloads it from the Hugging Face Hub when the user opts in.
//
// Order: an explicit directory (LA_WEIGHTS_DIR, alias LA_MODEL_PATH); else the pinned
// revision's snapshot in the Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else
// ~/.cache/huggingface/hub); else, only with LA_DOWNLOAD=1, a download of that revision into
// the same cache layout, so Python tools and this worker share one copy.
package weights

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Repo is the Hub repository of the checkpoint the service is validated against; the
// revision is a setting (TT_WEIGHTS_REVISION, its default pinned in package config).
const Repo = "nvidia/LocateAnything-3B"

// Options says where to look. Resolve reads no environment itself: the settings are
// declared here (the tags: variable, default, meaning) and package config reads them.
type Options struct {
	Dir      string `envconfig:"LA_WEIGHTS_DIR" desc:"checkpoint directory; empty = the pinned snapshot in the Hub cache, else the bundled model"`
	Repo     string `ignored:"true"` // Hub repository; Repo when empty (tests point it elsewhere)
	Revision string `envconfig:"TT_WEIGHTS_REVISION" default:"c32291ca5e996f5a7a485845b4f57a233936bba0" desc:"Hub revision of the pinned LocateAnything-3B snapshot"`

	HubCache string `envconfig:"HF_HUB_CACHE" desc:"Hugging Face cache directory; empty = HF_HOME/hub"`
	HFHome   string `envconfig:"HF_HOME" desc:"Hugging Face home; empty = HOME/.cache/huggingface"`
	Home     string `envconfig:"HOME" desc:"home directory, where the Hugging Face cache is by default"`

	Download bool         `envconfig:"LA_DOWNLOAD" default:"false" desc:"fetch a missing pinned snapshot from the Hub"`
	Endpoint string       `envconfig:"HF_ENDPOINT" default:"https://huggingface.co" desc:"Hub the snapshot is downloaded from"`
	Token    string       `envconfig:"HF_TOKEN" secret:"true" desc:"Hub token for the download; sent only to the Hub, never logged"`
	Client   *http.Client `ignored:"true"` // nil: a client without an overall timeout (the files are large)

	// Progress, when set, is told about each file being downloaded: at its start, every
	// percent or so, and at its end (done == total). total is -1 when unknown.
	Progress func(file string, done, total int64) `ignored:"true"`
}

// String describes the options with the token redacted.
func (o Options) String() string {
	return fmt.Sprintf("weights.Options{Dir:%q Repo:%q Revision:%q HubCache:%q HFHome:%q Home:%q Download:%t Endpoint:%q Token:%s}",
		o.Dir, o.repo(), o.revision(), o.HubCache, o.HFHome, o.Home, o.Download, o.endpoint(), redact(o.Token))
}

// GoString keeps %#v from printing the token.
func (o Options) GoString() string { return o.String() }

// LogValue makes slog print the options with the token redacted.
func (o Options) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("dir", o.Dir),
		slog.String("repo", o.repo()),
		slog.String("revision", o.revision()),
		slog.String("cache", o.cacheDir()),
		slog.Bool("download", o.Download),
		slog.String("endpoint", o.endpoint()),
		slog.String("token", redact(o.Token)),
	)
}

func redact(s string) string {
	if s == "" {
		return `""`
	}
	return "[redacted]"
}

func (o Options) repo() string {
	if o.Repo == "" {
		return Repo
	}
	return o.Repo
}
func (o Options) revision() string { return o.Revision }
func (o Options) endpoint() string { return strings.TrimSuffix(o.Endpoint, "/") }

// cacheDir is the Hugging Face hub cache the options point at, "" when none can be named.
func (o Options) cacheDir() string {
	switch {
	case o.HubCache != "":
		return o.HubCache
	case o.HFHome != "":
		return filepath.Join(o.HFHome, "hub")
	case o.Home != "":
		return filepath.Join(o.Home, ".cache", "huggingface", "hub")
	default:
		return ""
	}
}

// repoDir is the repository's folder in the cache: models--<org>--<name>.
func (o Options) repoDir() string {
	return filepath.Join(o.cacheDir(), "models--"+strings.ReplaceAll(o.repo(), "/", "--"))
}

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Resolve returns the checkpoint directory: Dir when set, else the cached snapshot of the
// revision, else (with Download) a freshly downloaded one. The error says what to set when
// nothing is found.
func Resolve(ctx context.Context, opts Options) (string, error) {
	if opts.Dir != "" {
		if err := checkDir(opts.Dir); err != nil {
			return "", fmt.Errorf("weights: LA_WEIGHTS_DIR/LA_MODEL_PATH %s: %w", opts.Dir, err)
		}
		return opts.Dir, nil
	}
	if opts.revision() == "" {
		return "", errors.New("weights: no revision given (TT_WEIGHTS_REVISION)")
	}
	if opts.Download && opts.endpoint() == "" {
		return "", errors.New("weights: LA_DOWNLOAD needs a Hub endpoint (HF_ENDPOINT)")
	}
	if strings.ContainsAny(opts.revision(), `/\`) || strings.Contains(opts.revision(), "..") {
		return "", fmt.Errorf("weights: TT_WEIGHTS_REVISION %q: want a commit hash or a branch name", opts.revision())
	}
	if opts.cacheDir() == "" {
		return "", fmt.Errorf("weights: no Hugging Face cache to look in: set LA_WEIGHTS_DIR to the checkpoint directory, or HF_HUB_CACHE, HF_HOME or HOME (%w)", ErrNotCached)
	}

	snapshot, why := opts.cachedSnapshot()
	if why == nil {
		return snapshot, nil
	}
	if !opts.Download {
		if _, err := os.Stat(opts.repoDir()); errors.Is(err, os.ErrNotExist) {
			why = fmt.Errorf("%w: %w", ErrNotCached, why)
		}
		return "", fmt.Errorf("weights: %s@%s is not in the Hugging Face cache %s (%w); "+
			"set LA_WEIGHTS_DIR to a directory holding the checkpoint, point HF_HUB_CACHE or HF_HOME at a cache that has "+
			"this revision, or set LA_DOWNLOAD=1 to download it (about 7.7 GB) from %s",
			opts.repo(), opts.revision(), opts.cacheDir(), why, opts.endpoint())
	}
	dir, err := download(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("weights: download %s@%s: %w", opts.repo(), opts.revision(), err)
	}
	return dir, nil
}

// cachedSnapshot returns the snapshot folder of the revision if it is complete, or why not.
func (o Options) cachedSnapshot() (string, error) {
	commit := o.revision()
	if !commitHash.MatchString(commit) {
		ref, err := os.ReadFile(filepath.Join(o.repoDir(), "refs", commit))
		if err != nil {
			return "", fmt.Errorf("no ref %q: %w", commit, err)
		}
		commit = strings.TrimSpace(string(ref))
		if !commitHash.MatchString(commit) {
			return "", fmt.Errorf("ref %q holds %q, not a commit hash", o.revision(), commit)
		}
	}
	snapshot := filepath.Join(o.repoDir(), "snapshots", commit)
	if err := checkSnapshot(snapshot); err != nil {
		return "", err
	}
	return snapshot, nil
}

func checkDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}

// checkSnapshot reports whether a snapshot folder holds a usable checkpoint: config.json and
// every safetensors shard the index names (or, without an index, at least one
// .safetensors file). The downloader writes config.json last, so a download that was cut
// short never passes.
func checkSnapshot(dir string) error {
	if err := checkDir(dir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("snapshot %s is incomplete: %w", dir, err)
	}
	index, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if errors.Is(err, os.ErrNotExist) {
		shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if len(shards) == 0 {
			return fmt.Errorf("snapshot %s has no .safetensors file", dir)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", dir, err)
	}
	var parsed struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(index, &parsed); err != nil {
		return fmt.Errorf("snapshot %s: model.safetensors.index.json: %w", dir, err)
	}
	seen := map[string]bool{}
	for _, shard := range parsed.WeightMap {
		if seen[shard] {
			continue
		}
		seen[shard] = true
		if !filepath.IsLocal(shard) {
			return fmt.Errorf("snapshot %s: index names shard %q outside the folder", dir, shard)
		}
		if _, err := os.Stat(filepath.Join(dir, shard)); err != nil {
			return fmt.Errorf("snapshot %s is incomplete: %w", dir, err)
		}
	}
	if len(seen) == 0 {
		return fmt.Errorf("snapshot %s: model.safetensors.index.json names no shards", dir)
	}
	return nil
}
