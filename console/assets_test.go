package console

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestAssetsAreThePageAndWhatItLoads: the embedded files are the page and every file it
// references, all served from the binary (no CDN, no build step).
func TestAssetsAreThePageAndWhatItLoads(t *testing.T) {
	a := Assets()
	index, err := fs.ReadFile(a, "index.html")
	if err != nil {
		t.Fatalf("index.html is not embedded: %v", err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"#]+)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 2 {
		t.Fatalf("index.html references %d files, want at least the script and the style sheet", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if strings.Contains(ref, "//") {
			t.Errorf("index.html loads %s from elsewhere: the console must work offline", ref)
			continue
		}
		// the page is served at /console/ and its files at /console/assets/...
		name, ok := strings.CutPrefix(ref, "assets/")
		if !ok {
			t.Errorf("index.html references %s, not under assets/", ref)
			continue
		}
		if b, err := fs.ReadFile(a, name); err != nil || len(b) == 0 {
			t.Errorf("index.html references %s, which is not embedded (%v)", ref, err)
		}
	}
}

// TestPageWritesNoMarkupFromData: labels, queries and error messages come from users, so
// the script builds the page with DOM calls and text nodes and never parses markup.
func TestPageWritesNoMarkupFromData(t *testing.T) {
	js, err := fs.ReadFile(Assets(), "app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(string(js), sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
}
