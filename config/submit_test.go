package config

import (
	"reflect"
	"strings"
	"testing"
)

// submit's default NATS server is the embedded worker's default listen address: if
// LA_NATS_LISTEN's default moved, submit would knock on the wrong port.
func TestSubmitNATSURLIsTheEmbeddedDefault(t *testing.T) {
	f, _ := reflect.TypeOf(Embedded{}).FieldByName("Listen")
	if want := "nats://" + f.Tag.Get("default"); SubmitNATSURL != want {
		t.Errorf("SubmitNATSURL = %q, want %q (LA_NATS_LISTEN's default)", SubmitNATSURL, want)
	}
}

// Finish fills in the single-machine defaults and refuses what submit cannot run with,
// naming each variable once.
func TestSubmitFinish(t *testing.T) {
	var s Submit
	s.NATS.Timeout, s.Storage.MaxImageBytes = 1, 1
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if s.NATS.URL != SubmitNATSURL || len(s.Storage.FileRoots) != 1 || s.Storage.FileRoots[0] != "/" {
		t.Errorf("defaults: URL %q, file roots %q; want %q and [/]", s.NATS.URL, s.Storage.FileRoots, SubmitNATSURL)
	}
	remote := Submit{}
	remote.NATS.URL, remote.NATS.Timeout, remote.Storage.MaxImageBytes = "nats://nats-1:4222", 1, 1
	if err := remote.Finish(); err != nil || len(remote.Storage.FileRoots) != 0 {
		t.Errorf("a remote NATS server: roots %q, %v; want none (its workers' files are not here)", remote.Storage.FileRoots, err)
	}
	bad := Submit{}
	bad.UploadPrefix = "frames/"
	err := bad.Finish()
	for _, name := range []string{"LA_NATS_TIMEOUT", "LA_MAX_IMAGE_BYTES", "LA_SUBMIT_UPLOAD"} {
		if err == nil || strings.Count(err.Error(), name) != 1 {
			t.Errorf("zero timeout, zero image size, upload not s3://: %v; want %s named once", err, name)
		}
	}
}
