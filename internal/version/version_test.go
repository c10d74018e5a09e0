package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/locateanything/detect", Version: "v0.0.0-20260301120000-55e44d6c1e2a+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "55e44d6c1e2a0000000000000000000000000000"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	cases := []struct {
		name                    string
		linkVersion, linkCommit string
		bi                      *debug.BuildInfo
		want                    Info
	}{
		{"link-time values win", "v1.2.0", "abc123", stamped,
			Info{Version: "v1.2.0", Commit: "abc123", GoVersion: "go1.26.8"}},
		{"the VCS stamp fills in", "", "", stamped,
			Info{Version: "v0.0.0-20260301120000-55e44d6c1e2a+dirty", Commit: "55e44d6c1e2a0000000000000000000000000000", Modified: true, GoVersion: "go1.26.8"}},
		{"nothing recorded", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Info{Version: Unknown, Commit: Unknown, GoVersion: runtime.Version()}},
		{"no build information", "", "", nil,
			Info{Version: Unknown, Commit: Unknown, GoVersion: runtime.Version()}},
	}
	for _, c := range cases {
		got := resolve(c.linkVersion, c.linkCommit, c.bi)
		c.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestString(t *testing.T) {
	in := Info{Version: "v1.2.0", Commit: "abc123", Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := in.String("submit"), "submit v1.2.0 (commit abc123, modified, go1.26.8 linux/amd64)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := Get().String("worker"); !strings.Contains(got, runtime.Version()) {
		t.Errorf("%q does not name the Go version %s", got, runtime.Version())
	}
}
