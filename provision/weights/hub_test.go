package weights_test

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHub imitates the parts of the Hugging Face Hub a download uses: the revision API,
// /resolve/ with the Hub's metadata headers (X-Linked-Etag and X-Linked-Size for LFS files
// redirected to a CDN path, ETag and Content-Length for small files), and a CDN that honours
// Range. It can cut a transfer short once, serve bytes that do not match the advertised
// sha256, and require a token.
type fakeHub struct {
	repo, commit string
	files        map[string][]byte
	lfs          map[string]bool

	token    string           // when set, the API and /resolve/ demand "Bearer <token>"
	cutAfter map[string]int64 // the first CDN transfer of the file stops after this many bytes
	corrupt  map[string]bool  // the CDN serves other bytes than the advertised sha256

	mu       sync.Mutex
	ranges   map[string][]string // Range header of every content GET, per file
	requests int
}

func newFakeHub(t *testing.T) (*fakeHub, *httptest.Server) {
	h := &fakeHub{
		repo:     "nvidia/LocateAnything-3B",
		commit:   "c32291ca5e996f5a7a485845b4f57a233936bba0",
		files:    map[string][]byte{},
		lfs:      map[string]bool{},
		cutAfter: map[string]int64{},
		corrupt:  map[string]bool{},
		ranges:   map[string][]string{},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	shard := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	h.files["config.json"] = []byte(`{"model_type": "locateanything"}`)
	h.files["model.safetensors.index.json"] = []byte(`{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`)
	h.files["model-00001-of-00002.safetensors"] = shard(300_000)
	h.files["model-00002-of-00002.safetensors"] = shard(200_000)
	h.files["tokenizer/vocab.json"] = []byte(`{"a": 0}`)
	h.lfs["model-00001-of-00002.safetensors"] = true
	h.lfs["model-00002-of-00002.safetensors"] = true
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// gitBlobSHA1 is the git object id of a file, the ETag the Hub gives small files.
func gitBlobSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func (h *fakeHub) etag(name string) string {
	if h.lfs[name] {
		return sha256Hex(h.files[name])
	}
	return gitBlobSHA1(h.files[name])
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests++
	h.mu.Unlock()
	api := "/api/models/" + h.repo + "/revision/"
	resolve := "/" + h.repo + "/resolve/"
	switch {
	case strings.HasPrefix(r.URL.Path, api):
		if !h.authorized(w, r) {
			return
		}
		rev := strings.TrimPrefix(r.URL.Path, api)
		if rev != h.commit && rev != "main" {
			http.Error(w, "revision not found", http.StatusNotFound)
			return
		}
		type sibling struct {
			RFilename string `json:"rfilename"`
		}
		var sibs []sibling
		for name := range h.files {
			sibs = append(sibs, sibling{name})
		}
		json.NewEncoder(w).Encode(map[string]any{"id": h.repo, "sha": h.commit, "siblings": sibs})
	case strings.HasPrefix(r.URL.Path, resolve):
		if !h.authorized(w, r) {
			return
		}
		rev, name, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, resolve), "/")
		data, ok := h.files[name]
		if !ok || rev != h.commit {
			http.Error(w, "entry not found", http.StatusNotFound)
			return
		}
		w.Header().Set("X-Repo-Commit", h.commit)
		if h.lfs[name] {
			w.Header().Set("X-Linked-Etag", `"`+h.etag(name)+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
			w.Header().Set("ETag", `"not-the-content-hash"`)
			http.Redirect(w, r, "/cdn/"+name, http.StatusFound)
			return
		}
		w.Header().Set("ETag", `"`+h.etag(name)+`"`)
		h.serveContent(w, r, name, data)
	case strings.HasPrefix(r.URL.Path, "/cdn/"):
		name := strings.TrimPrefix(r.URL.Path, "/cdn/")
		data := h.files[name]
		if h.corrupt[name] {
			data = bytes.Clone(data)
			data[len(data)/2] ^= 0xff
		}
		h.serveContent(w, r, name, data)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHub) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h.token != "" && r.Header.Get("Authorization") != "Bearer "+h.token {
		http.Error(w, "Invalid credentials in Authorization header", http.StatusUnauthorized)
		return false
	}
	return true
}

// serveContent serves data with Range support; the first GET of a file listed in cutAfter
// sends the full length in its headers, then only part of the body, and drops the
// connection, as a network failure mid-transfer does.
func (h *fakeHub) serveContent(w http.ResponseWriter, r *http.Request, name string, data []byte) {
	if r.Method == http.MethodGet {
		h.mu.Lock()
		h.ranges[name] = append(h.ranges[name], r.Header.Get("Range"))
		cut, cutNow := h.cutAfter[name]
		delete(h.cutAfter, name)
		h.mu.Unlock()
		if cutNow {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.WriteHeader(http.StatusOK)
			w.Write(data[:cut])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
}

func (h *fakeHub) rangesOf(name string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ranges[name]...)
}

func (h *fakeHub) requestCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests
}
