package console_test

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage/s3test"
)

// getBytes is a GET's status, content type and body.
func (e *env) getBytes(t *testing.T, path string) (int, string, []byte) {
	t.Helper()
	resp, err := e.client.Get(e.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// checkThumb fails unless b is a JPEG of at most 256 pixels on its long side, scaled from
// a picture of w x h pixels.
func checkThumb(t *testing.T, what string, b []byte, w, h int) {
	t.Helper()
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil || format != "jpeg" {
		t.Fatalf("%s: not a JPEG (%s, %v)", what, format, err)
	}
	long := max(w, h)
	if cfg.Width != w*256/long || cfg.Height != h*256/long {
		t.Errorf("%s: %dx%d, want %dx%d (%dx%d scaled to 256 on the long side)", what, cfg.Width, cfg.Height, w*256/long, h*256/long, w, h)
	}
}

// TestConsoleServesPicturesAndThumbnails: the console serves a job's stored overlay (or
// its input image when it has none) exactly as storage holds it, for file:// and s3://
// alike, and thumbnails made once, stored beside the overlay or the result and served
// from there afterwards; ids that are not ids are refused, a missing picture is 404.
func TestConsoleServesPicturesAndThumbnails(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "frames")
	srv.CreateBucket(t, "out")
	e := newEnv(t, map[string]string{
		"LA_S3_ENDPOINT": srv.Endpoint, "LA_S3_SECURE": "false", "LA_S3_PATH_STYLE": "true",
		"LA_S3_ACCESS_KEY": srv.AccessKey, "LA_S3_SECRET_KEY": srv.SecretKey,
	})
	e.start(t, nil)
	dog, err := os.ReadFile(filepath.Join(e.images, "dog.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	mc := srv.Client(t)
	ctx := context.Background()
	if _, err := mc.PutObject(ctx, "frames", "cam/dog.jpg", bytes.NewReader(dog), int64(len(dog)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	e.publish(t, jobs.Job{ID: "drawn", Image: e.image("dog.jpg"), Query: "dog", Overlay: true, Batch: "p"})
	e.publish(t, jobs.Job{ID: "plain", Image: e.image("dog.jpg"), Query: "dog", Batch: "p"})
	e.publish(t, jobs.Job{ID: "remote", Image: "s3://frames/cam/dog.jpg", Query: "dog", Overlay: true, Output: "s3://out/res/", Batch: "p"})
	e.publish(t, jobs.Job{ID: "lost", Image: "file://" + filepath.Join(e.inputs, "none.jpg"), Query: "dog", Batch: "p"})
	for _, id := range []string{"drawn", "plain", "lost"} {
		e.waitResult(t, id)
	}
	var remote jobs.Result
	testwait.Until(t, 2*time.Minute, "the result of job remote", func() bool {
		var job struct{ Result *jobs.Result }
		if e.get(t, "/console/api/jobs/remote", &job) != http.StatusOK || job.Result == nil {
			return false
		}
		remote = *job.Result
		return true
	})
	if remote.Status != jobs.StatusSucceeded || remote.OverlayURL == nil {
		t.Fatalf("job remote: %s %+v", remote.Status, remote.Error)
	}
	drawn, _, _ := e.storedResult(t, "drawn")
	results := filepath.Join(e.dataDir, "results")

	// The overlay, as stored.
	overlay, err := os.ReadFile(filepath.Join(results, "drawn.png"))
	if err != nil {
		t.Fatal(err)
	}
	code, ctype, body := e.getBytes(t, "/console/api/pictures/drawn")
	if code != 200 || ctype != "image/png" || !bytes.Equal(body, overlay) {
		t.Errorf("picture of drawn: %d %s, %d bytes; want the stored PNG overlay (%d bytes)", code, ctype, len(body), len(overlay))
	}
	// Its thumbnail, made once and kept beside it.
	code, ctype, thumb := e.getBytes(t, "/console/api/pictures/drawn?size=thumb")
	if code != 200 || ctype != "image/jpeg" {
		t.Fatalf("thumbnail of drawn: %d %s", code, ctype)
	}
	checkThumb(t, "thumbnail of drawn", thumb, drawn.Width, drawn.Height)
	kept, err := os.ReadFile(filepath.Join(results, "drawn.thumb.jpg"))
	if err != nil || !bytes.Equal(kept, thumb) {
		t.Fatalf("the thumbnail is not kept beside the overlay (%v)", err)
	}
	// Served from there afterwards: replace the kept one, and that is what comes back.
	small := jpegOf(t, 8, 4)
	if err := os.WriteFile(filepath.Join(results, "drawn.thumb.jpg"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, again := e.getBytes(t, "/console/api/pictures/drawn?size=thumb"); !bytes.Equal(again, small) {
		t.Error("the second thumbnail request made a new one instead of serving the kept one")
	}

	// No overlay: the input image, and a thumbnail beside the result.
	if code, ctype, body := e.getBytes(t, "/console/api/pictures/plain?size=full"); code != 200 || ctype != "image/jpeg" || !bytes.Equal(body, dog) {
		t.Errorf("picture of plain: %d %s, %d bytes; want the input image", code, ctype, len(body))
	}
	if code, _, thumb := e.getBytes(t, "/console/api/pictures/plain?size=thumb"); code != 200 {
		t.Errorf("thumbnail of plain: %d", code)
	} else if kept, err := os.ReadFile(filepath.Join(results, "plain.thumb.jpg")); err != nil || !bytes.Equal(kept, thumb) {
		t.Errorf("the thumbnail of plain is not kept beside its result (%v)", err)
	}

	// s3://: the overlay through the storage layer's credentials, its thumbnail kept in the bucket.
	obj, err := mc.GetObject(ctx, "out", "res/remote.png", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	if code, ctype, body := e.getBytes(t, "/console/api/pictures/remote"); code != 200 || ctype != "image/png" || !bytes.Equal(body, want) {
		t.Errorf("picture of remote: %d %s, %d bytes; want s3://out/res/remote.png (%d bytes)", code, ctype, len(body), len(want))
	}
	code, _, thumb = e.getBytes(t, "/console/api/pictures/remote?size=thumb")
	if code != 200 {
		t.Fatalf("thumbnail of remote: %d %s", code, thumb)
	}
	checkThumb(t, "thumbnail of remote", thumb, remote.Width, remote.Height)
	if st, err := mc.StatObject(ctx, "out", "res/remote.thumb.jpg", minio.StatObjectOptions{}); err != nil || st.Size != int64(len(thumb)) {
		t.Errorf("the thumbnail of remote is not kept at s3://out/res/remote.thumb.jpg: %v", err)
	}

	// Refusals.
	for path, want := range map[string]int{
		"/console/api/pictures/lost":                 404, // its image is not there
		"/console/api/pictures/never-seen":           404,
		"/console/api/pictures/a.b":                  400,
		"/console/api/pictures/drawn?size=huge":      400,
		"/console/api/pictures/%2E%2E%2Fetc%2Fhosts": 400,
	} {
		if code, _, body := e.getBytes(t, path); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		} else if strings.Contains(string(body), srv.SecretKey) {
			t.Errorf("GET %s quotes the S3 secret key", path)
		}
	}
}

// jpegOf is a grey JPEG of w x h pixels.
func jpegOf(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
