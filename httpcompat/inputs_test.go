package httpcompat

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// formPart is one part of a multipart/form-data body: a file when filename is set.
type formPart struct {
	name, filename string
	value          []byte
}

// multipartBody encodes parts as curl -F does, and returns the body and its Content-Type.
func multipartBody(t *testing.T, parts ...formPart) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p.filename != "" {
			w, err = mw.CreateFormFile(p.name, p.filename)
		} else {
			w, err = mw.CreateFormField(p.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(p.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), mw.FormDataContentType()
}

// postRaw posts body with the given Content-Type to /predict.
func postRaw(t *testing.T, url, contentType string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/predict", contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func postForm(t *testing.T, url string, parts ...formPart) (int, []byte) {
	t.Helper()
	body, ct := multipartBody(t, parts...)
	return postRaw(t, url, ct, body)
}

// TestPredictMultipartUpload: an upload (curl -F image=@dog.jpg -F query=...) is answered
// byte for byte as the same request in the contract's JSON body, fields read the same way.
func TestPredictMultipartUpload(t *testing.T) {
	h := newHarness(t, setup{})
	img := dogJPEG
	status, want := h.predict(t, map[string]any{
		"image": base64.StdEncoding.EncodeToString(img), "query": "dog</c>cat",
		"max_new_tokens": 64, "return_overlay": true, "task": "detect",
	})
	if status != http.StatusOK {
		t.Fatalf("JSON body: %d %s", status, want)
	}
	status, got := postForm(t, h.url,
		formPart{name: "image", filename: "dog.jpg", value: img},
		formPart{name: "query", value: []byte("dog</c>cat")},
		formPart{name: "max_new_tokens", value: []byte("64")},
		formPart{name: "return_overlay", value: []byte("true")},
		formPart{name: "task", value: []byte("detect")},
		formPart{name: "comment", value: []byte("a part the server does not read")},
	)
	if status != http.StatusOK {
		t.Fatalf("multipart body: %d %s", status, got)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("multipart answer differs from the JSON answer:\n%.400s\nwant\n%.400s", got, want)
	}
}

// TestPredictMultipartErrors: what is wrong with an upload is answered as the JSON body's
// faults are (422 entries naming the field, 400 for the image), and a body that is not the
// form it claims is a 400 that says so.
func TestPredictMultipartErrors(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{MaxBodyBytes: 1 << 20}})
	img := dogJPEG
	file := formPart{name: "image", filename: "dog.jpg", value: img}
	query := formPart{name: "query", value: []byte("dog")}
	for _, c := range []struct {
		name  string
		parts []formPart
		code  int
		want  string // in the body
	}{
		{"no image", []formPart{query}, http.StatusUnprocessableEntity, `"loc":["body","image"],"msg":"Field required"`},
		{"no query", []formPart{file}, http.StatusUnprocessableEntity, `"loc":["body","query"],"msg":"Field required"`},
		{"query given twice", []formPart{file, query, query}, http.StatusUnprocessableEntity, `query is given more than once`},
		{"a budget that is not a number", []formPart{file, query, {name: "max_new_tokens", value: []byte("many")}},
			http.StatusUnprocessableEntity, `"type":"int_parsing","loc":["body","max_new_tokens"]`},
		{"an overlay flag that is not a bool", []formPart{file, query, {name: "return_overlay", value: []byte("perhaps")}},
			http.StatusUnprocessableEntity, `"type":"bool_parsing","loc":["body","return_overlay"]`},
		{"both the file and a URL", []formPart{file, query, {name: "image_url", value: []byte("file:///x.jpg")}},
			http.StatusUnprocessableEntity, `either image (or an uploaded file) or image_url, not both`},
		{"an empty file", []formPart{{name: "image", filename: "dog.jpg"}, query}, http.StatusBadRequest, `image is empty`},
		{"not an image", []formPart{{name: "image", filename: "dog.jpg", value: []byte("GIF? no")}, query}, http.StatusBadRequest, `cannot decode image`},
		{"over the body limit", []formPart{{name: "image", filename: "big.jpg", value: make([]byte, 1<<20)}, query},
			http.StatusRequestEntityTooLarge, `LA_HTTP_MAX_BODY_BYTES`},
	} {
		status, body := postForm(t, h.url, c.parts...)
		if status != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, status, body, c.code, c.want)
		}
	}

	body, ct := multipartBody(t, file, query)
	many := make([]formPart, maxFormParts+1)
	for i := range many {
		many[i] = formPart{name: fmt.Sprintf("x%d", i), value: []byte("x")}
	}
	manyBody, manyCT := multipartBody(t, many...)
	for _, c := range []struct {
		name, contentType string
		body              []byte
		want              string
	}{
		{"no boundary", "multipart/form-data", body, "without a boundary"},
		{"cut short", ct, body[:len(body)/2], "cannot read the multipart/form-data"},
		{"another boundary", "multipart/form-data; boundary=elsewhere", body, "cannot read the multipart/form-data"},
		{"too many parts", manyCT, manyBody, fmt.Sprintf("more than %d parts", maxFormParts)},
	} {
		status, out := postRaw(t, h.url, c.contentType, c.body)
		if status != http.StatusBadRequest || !strings.Contains(detailString(t, out), c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.name, status, out, c.want)
		}
	}
}

// TestPredictImageURL: with image URLs on, an image_url is read through a real storage
// Router (file roots and an S3 service, versitygw) and answered byte for byte as the image
// sent inline; what the storage layer refuses is a 4xx that says why; with them off the
// field is refused, naming the setting.
func TestPredictImageURL(t *testing.T) {
	img := dogJPEG
	root, outside := t.TempDir(), t.TempDir()
	for dir, name := range map[string]string{root: "dog.jpg", outside: "secret.jpg"} {
		if err := os.WriteFile(filepath.Join(dir, name), img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "big.jpg"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	s3 := s3test.Start(t)
	s3.CreateBucket(t, "images")
	if _, err := s3.Client(t).PutObject(t.Context(), "images", "photos/dog.jpg", bytes.NewReader(img), int64(len(img)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	router, err := storage.Open(storage.Config{
		Endpoint: s3.Endpoint, Region: s3test.Region, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, PathStyle: "true",
		FileRoots: []string{root}, MaxImageBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = router.Close() })

	h := newHarness(t, setup{cfg: Config{ImageURLs: true}, opts: Options{Images: router}})
	status, want := h.predict(t, map[string]any{"image": base64.StdEncoding.EncodeToString(img), "query": "dog"})
	if status != http.StatusOK {
		t.Fatalf("inline image: %d %s", status, want)
	}
	for _, url := range []string{"file://" + filepath.Join(root, "dog.jpg"), "s3://images/photos/dog.jpg"} {
		status, got := h.predict(t, map[string]any{"image_url": url, "query": "dog"})
		if status != http.StatusOK || !bytes.Equal(got, want) {
			t.Errorf("%s: %d %.300s, want 200 and the inline image's answer", url, status, got)
		}
	}
	status, got := postForm(t, h.url, formPart{name: "image_url", value: []byte("s3://images/photos/dog.jpg")},
		formPart{name: "query", value: []byte("dog")})
	if status != http.StatusOK || !bytes.Equal(got, want) {
		t.Errorf("image_url in a form: %d %.300s, want 200 and the inline image's answer", status, got)
	}

	for _, c := range []struct {
		body any
		code int
		want string
	}{
		{map[string]any{"image_url": "file://" + filepath.Join(outside, "secret.jpg"), "query": "dog"}, http.StatusForbidden, "not allowed"},
		{map[string]any{"image_url": "file://" + filepath.Join(root, "nope.jpg"), "query": "dog"}, http.StatusBadRequest, "not found"},
		{map[string]any{"image_url": "s3://images/photos/nope.jpg", "query": "dog"}, http.StatusBadRequest, "not found"},
		{map[string]any{"image_url": "file://" + filepath.Join(root, "big.jpg"), "query": "dog"}, http.StatusRequestEntityTooLarge, "size limit"},
		{map[string]any{"image_url": "https://example.com/dog.jpg", "query": "dog"}, http.StatusBadRequest, "bad storage URL"},
		{map[string]any{"image_url": "file://" + filepath.Join(root, "dog.jpg"), "query": ""}, http.StatusBadRequest, "query must not be empty"},
		{map[string]any{"image_url": "s3://images/photos/dog.jpg", "image": "eA==", "query": "dog"}, http.StatusUnprocessableEntity, "not both"},
	} {
		status, body := h.predict(t, c.body)
		if status != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("%v: %d %s, want %d with %q", c.body, status, body, c.code, c.want)
		}
	}

	off := newHarness(t, setup{opts: Options{Images: router}})
	status, body := off.predict(t, map[string]any{"image_url": "s3://images/photos/dog.jpg", "query": "dog"})
	if status != http.StatusBadRequest || !strings.Contains(detailString(t, body), "LA_HTTP_IMAGE_URLS") {
		t.Errorf("image_url while off: %d %s, want 400 naming LA_HTTP_IMAGE_URLS", status, body)
	}
	if _, err := New(testConfig(Config{ImageURLs: true}), Options{}); err == nil {
		t.Error("New took image URLs without an image source")
	}
}
