package storage_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

func TestParseURL(t *testing.T) {
	ok := []struct {
		raw  string
		want storage.Location
	}{
		{"s3://frames/cam04/000123.jpg", storage.Location{Scheme: "s3", Bucket: "frames", Key: "cam04/000123.jpg"}},
		{"S3://frames/a.jpg", storage.Location{Scheme: "s3", Bucket: "frames", Key: "a.jpg"}},
		{"s3://my.bucket-1/a b?c#d.jpg", storage.Location{Scheme: "s3", Bucket: "my.bucket-1", Key: "a b?c#d.jpg"}},
		{"s3://abc/x%20y", storage.Location{Scheme: "s3", Bucket: "abc", Key: "x%20y"}}, // no unescaping
		{"file:///data/frames/a.jpg", storage.Location{Scheme: "file", Path: "/data/frames/a.jpg"}},
		{"file:///data/with space.jpg", storage.Location{Scheme: "file", Path: "/data/with space.jpg"}},
		{"s3://192.168.5.4x/a.jpg", storage.Location{Scheme: "s3", Bucket: "192.168.5.4x", Key: "a.jpg"}},
		{"s3://frames/ a", storage.Location{Scheme: "s3", Bucket: "frames", Key: " a"}},
	}
	for _, c := range ok {
		got, err := storage.ParseURL(c.raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.raw, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseURL(%q) = %+v, want %+v", c.raw, got, c.want)
		}
	}

	bad := []struct{ raw, part string }{
		{"", "url"},
		{"s3://b\x00ad/key", "url"},
		{"\xff", "url"},
		{"frames/a.jpg", "scheme"},
		{"/data/a.jpg", "scheme"},
		{"http://host/a.jpg", "scheme"},
		{"gs://bucket/a.jpg", "scheme"},
		{"s3:///a.jpg", "bucket"},
		{"s3://ab/a.jpg", "bucket"},                          // too short
		{"s3://" + strings.Repeat("b", 64) + "/k", "bucket"}, // too long
		{"s3://Frames/a.jpg", "bucket"},                      // upper case
		{"s3://fr_ames/a.jpg", "bucket"},                     // underscore
		{"s3://-frames/a.jpg", "bucket"},
		{"s3://frames./a.jpg", "bucket"},
		{"s3://fr..ames/a.jpg", "bucket"},
		{"s3://192.168.5.4/a.jpg", "bucket"}, // S3 and minio-go refuse IP-address names
		{"s3://fr.-ames/a.jpg", "bucket"},
		{"s3://fr-.ames/a.jpg", "bucket"},
		{"s3://frames/ ", "key"},  // white space alone, which minio-go refuses
		{"s3://frames/\t", "key"}, // likewise
		{"s3://frames", "key"},
		{"s3://frames/", "key"},
		{"s3://frames/dir/", "key"},
		{"s3://frames/" + strings.Repeat("k", 1025), "key"},
		{"file://relative/a.jpg", "path"},
		{"file://localhost/data/a.jpg", "path"},
		{"file:///data/../etc/passwd", "path"},
		{"file:///data/..", "path"},
		{"file:///data//a.jpg", "path"},
		{"file:///data/./a.jpg", "path"},
		{"file:///data/dir/", "path"},
		{"file:///", "path"},
		{"file:///data/" + strings.Repeat("d/", 2100) + "a.jpg", "path"}, // over PATH_MAX
		{"file:///data/" + strings.Repeat("n", 256) + ".jpg", "path"},    // a name over NAME_MAX
	}
	for _, c := range bad {
		_, err := storage.ParseURL(c.raw)
		if !errors.Is(err, storage.ErrBadURL) {
			t.Errorf("ParseURL(%q) = %v, want ErrBadURL", c.raw, err)
			continue
		}
		var ue *storage.URLError
		if !errors.As(err, &ue) || ue.Part != c.part {
			t.Errorf("ParseURL(%q): %v; want the %s named as the bad part", c.raw, err, c.part)
		}
		if !strings.Contains(err.Error(), c.part) {
			t.Errorf("ParseURL(%q): message %q does not name the %s", c.raw, err, c.part)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	ok := map[string]storage.Location{
		"s3://frames":          {Scheme: "s3", Bucket: "frames"},
		"s3://frames/":         {Scheme: "s3", Bucket: "frames"},
		"s3://frames/cam04/":   {Scheme: "s3", Bucket: "frames", Key: "cam04/"},
		"s3://frames/cam04/00": {Scheme: "s3", Bucket: "frames", Key: "cam04/00"},
		"file:///data/frames/": {Scheme: "file", Path: "/data/frames/"},
		"file:///data/fr":      {Scheme: "file", Path: "/data/fr"},
		"file:///":             {Scheme: "file", Path: "/"},
	}
	for raw, want := range ok {
		got, err := storage.ParsePrefix(raw)
		if err != nil || got != want {
			t.Errorf("ParsePrefix(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"file:///data/../x/", "file:///data//", "s3://x/", "ftp://a/b"} {
		if _, err := storage.ParsePrefix(raw); !errors.Is(err, storage.ErrBadURL) {
			t.Errorf("ParsePrefix(%q) = %v, want ErrBadURL", raw, err)
		}
	}
}

func TestLocationStringRoundTrips(t *testing.T) {
	for _, raw := range []string{"s3://frames/cam04/1.jpg", "file:///data/a b.jpg"} {
		loc, err := storage.ParseURL(raw)
		if err != nil {
			t.Fatal(err)
		}
		if loc.String() != raw {
			t.Errorf("String() = %q, want %q", loc.String(), raw)
		}
	}
}
