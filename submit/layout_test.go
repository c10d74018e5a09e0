package submit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
)

func TestRelUnder(t *testing.T) {
	cases := []struct{ root, p, want string }{
		{"frames", "frames/cam04/000123.jpg", "cam04/000123.jpg"},
		{"/data/frames", "/data/frames/cam04/000123.jpg", "cam04/000123.jpg"},
		{"/data/set", "/elsewhere/x.jpg", "elsewhere/x.jpg"}, // outside the root: the path, made relative
		{"/data/set", "/data/set/../../x.jpg", "x.jpg"},
		{"s3://frames/cam04/", "s3://frames/cam04/000123.jpg", "000123.jpg"},
		{"s3://frames/cam04", "s3://frames/cam04/day1/000123.jpg", "day1/000123.jpg"},
		{"/data/set", "s3://bucket/key/x.jpg", "bucket/key/x.jpg"},
		{"/data/set", "file:///abs/x.jpg", "abs/x.jpg"},
		{"", "/", "image"},
	}
	for _, c := range cases {
		if got := relUnder(c.root, c.p); got != c.want {
			t.Errorf("relUnder(%q, %q) = %q, want %q", c.root, c.p, got, c.want)
		}
	}
}

func TestGlobRoot(t *testing.T) {
	for pattern, want := range map[string]string{
		"frames/*/cam0?":     "frames",
		"frames/cam04/*.jpg": "frames/cam04",
		"*.jpg":              ".",
		"/data/[ab]/x/*.png": "/data",
	} {
		if got := globRoot(pattern); got != want {
			t.Errorf("globRoot(%q) = %q, want %q", pattern, got, want)
		}
	}
}

// Different work that would share a name is marked shared (and told apart by job id);
// the same image and settings listed twice is one job and shares nothing.
func TestAssignStems(t *testing.T) {
	items := []Item{
		{Image: "/f/cam04/x.jpg", Rel: "cam04/x.jpg"},
		{Image: "/f/cam04/x.png", Rel: "cam04/x.png"},                   // x.jpg beside x.png
		{Image: "/f/cam04/y.jpg", Rel: "cam04/y.jpg"},                   // alone
		{Image: "/f/cam04/y.jpg", Rel: "cam04/y.jpg", Query: "default"}, // the same job again
		{Image: "/f/m.jpg", Rel: "m.jpg", Query: "cat"},
		{Image: "/f/m.jpg", Rel: "m.jpg", Query: "dog"}, // one image, two queries
	}
	assignStems(items, JobDefaults{Query: "default", Task: engine.TaskDetect})
	want := []struct {
		stem   string
		shared bool
	}{{"cam04/x", true}, {"cam04/x", true}, {"cam04/y", false}, {"cam04/y", false}, {"m", true}, {"m", true}}
	for i, w := range want {
		if items[i].stem != w.stem || items[i].shared != w.shared {
			t.Errorf("item %d (%s): stem %q shared %t, want %q %t", i, items[i].Rel, items[i].stem, items[i].shared, w.stem, w.shared)
		}
	}
	if got := localName("cam04/x", true, "3f9a0c1b22de4f5a"); got != "cam04/x.3f9a0c1b22de" {
		t.Errorf("localName = %q", got)
	}
}

// Expand records each image's path below its input: a directory's tree, a glob's fixed
// part, a manifest's folder, a file's own name.
func TestExpandRecordsRelativePaths(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"frames/a/cam01/1.png", "frames/b/cam01/1.png", "frames/top.png"} {
		path := filepath.Join(dir, filepath.FromSlash(f))
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, os.WriteFile(path, []byte("a listing reads names, not pixels"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(dir, "frames", "set.jsonl"), []byte(`{"image": "a/cam01/1.png"}`+"\n"), 0o644))
	t.Chdir(dir)
	got := map[string][]string{}
	for _, arg := range []string{"frames", "frames/*/cam01", "frames/set.jsonl", "frames/top.png"} {
		items, err := Expand(t.Context(), []string{arg}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			got[arg] = append(got[arg], it.Rel)
		}
	}
	want := map[string][]string{
		"frames":           {"a/cam01/1.png", "b/cam01/1.png", "top.png"},
		"frames/*/cam01":   {"a/cam01/1.png", "b/cam01/1.png"},
		"frames/set.jsonl": {"a/cam01/1.png"},
		"frames/top.png":   {"top.png"},
	}
	for arg, w := range want {
		if !slices.Equal(got[arg], w) {
			t.Errorf("Expand(%s): rel paths %q, want %q", arg, got[arg], w)
		}
	}
}

// A row whose recorded files point outside the output directory is refused, so a
// hand-edited results.jsonl cannot make submit write elsewhere.
func TestRowFilesStayInside(t *testing.T) {
	id := "0123456789abcdef"
	for _, r := range []Row{
		{JSONFile: "../escape.json"}, {OverlayFile: "/etc/x.png"}, {JSONFile: "results/../../x.json"},
	} {
		r.ID = id
		if validRow(r) {
			t.Errorf("row with json_file %q overlay_file %q accepted", r.JSONFile, r.OverlayFile)
		}
	}
	ok := Row{JSONFile: "results/cam04/1.json", OverlayFile: "overlays/cam04/1.png"}
	ok.ID = id
	if !validRow(ok) {
		t.Error("a row with files inside refused")
	}
}
