package httpcompat

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/locateanything/detect/internal/version"
)

// TestInfoSourceIsTheBuildsCommit: /info's source.commit is the commit internal/version
// resolves (the Makefile's link-time commit, else the VCS stamp), the same one --version
// and la_build_info print, and null only when nothing recorded one.
func TestInfoSourceIsTheBuildsCommit(t *testing.T) {
	const rev = "55e44d6c1e2a0000000000000000000000000000"
	for _, c := range []struct {
		name         string
		build        *version.Info
		wantCommit   any
		wantModified bool
	}{
		{"link-time or stamped commit", &version.Info{Commit: rev, Modified: true}, rev, true},
		{"nothing recorded", &version.Info{Commit: version.Unknown}, nil, false},
		{"this binary", nil, commitOrNil(version.Get().Commit), version.Get().Modified},
	} {
		h := newHarness(t, setup{opts: Options{Build: c.build}})
		status, body := h.get(t, "/info")
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", c.name, status, body)
		}
		var got struct {
			Source struct {
				Repo     string `json:"repo"`
				Commit   any    `json:"commit"`
				Modified bool   `json:"modified"`
			} `json:"source"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Source.Commit != c.wantCommit || got.Source.Modified != c.wantModified || got.Source.Repo != sourceRepo {
			t.Errorf("%s: source = %+v, want commit %v modified %v", c.name, got.Source, c.wantCommit, c.wantModified)
		}
	}
}

func commitOrNil(commit string) any {
	if commit == version.Unknown {
		return nil
	}
	return commit
}
