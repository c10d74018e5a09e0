// Package version says which build a binary is: its version, the commit it was built
// from and the Go toolchain that built it, for `--version` and the build-info metric.
//
// Release builds set the version and commit at link time (the Makefile's build target
// and deploy/Dockerfile do):
//
//	go build -ldflags "-X github.com/locateanything/detect/internal/version.version=v1.2.0 \
//	    -X github.com/locateanything/detect/internal/version.commit=$(git rev-parse HEAD)"
//
// A plain `go build` in a checkout sets neither; the commit then comes from the VCS stamp
// the Go toolchain writes into the binary (vcs.revision, vcs.modified), and the version
// from the module version it records.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X (see the package comment); empty in an ordinary build.
var (
	version string
	commit  string
)

// Unknown stands for a version or commit nothing recorded.
const Unknown = "unknown"

// Info is one build's identity.
type Info struct {
	Version   string `json:"version"`    // v1.2.0, a pseudo-version, or "unknown"
	Commit    string `json:"commit"`     // the full revision, or "unknown"
	Modified  bool   `json:"modified"`   // built from a tree with uncommitted changes (VCS stamp only)
	GoVersion string `json:"go_version"` // go1.26.8
	Platform  string `json:"platform"`   // linux/amd64
}

// Get is this binary's Info: the link-time values where set, else the build information
// the toolchain recorded.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
}

// resolve combines the link-time version and commit with the recorded build information
// (nil when there is none): a link-time value wins; the VCS stamp and the module version
// fill what is missing.
func resolve(linkVersion, linkCommit string, bi *debug.BuildInfo) Info {
	in := Info{Version: linkVersion, Commit: linkCommit, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		stamped := ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				stamped = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true" && linkCommit == ""
			}
		}
		if in.Commit == "" {
			in.Commit = stamped
		}
		if v := bi.Main.Version; in.Version == "" && v != "" && v != "(devel)" {
			in.Version = v
		}
	}
	if in.Version == "" {
		in.Version = Unknown
	}
	if in.Commit == "" {
		in.Commit = Unknown
	}
	return in
}

// String is the --version line: "<program> <version> (commit <commit>[, modified],
// <go version> <platform>)".
func (in Info) String(program string) string {
	commit := in.Commit
	if in.Modified {
		commit += ", modified"
	}
	return fmt.Sprintf("%s %s (commit %s, %s %s)", program, in.Version, commit, in.GoVersion, in.Platform)
}
