package config

import "testing"

// Settings names the struct each variable is declared in, so listings (worker --help) can
// group them as the code does.
func TestSettingsSections(t *testing.T) {
	want := map[string]string{
		"LA_ENGINE": "Engine", "LA_NATS_URL": "NATS", "LA_HTTP_ADDR": "HTTP", "LA_DATA_DIR": "Worker",
		"LA_S3_ENDPOINT": "Storage", "LA_GRACE": "Runner",
	}
	for _, s := range Settings(Worker{}, nil) {
		if w, ok := want[s.Name]; ok && s.Section != w {
			t.Errorf("%s: section %q, want %q", s.Name, s.Section, w)
		}
		if s.Section == "" {
			t.Errorf("%s has no section", s.Name)
		}
	}
	for _, s := range Settings(Submit{}, nil) {
		if s.Name == "LA_SUBMIT_UPLOAD" && s.Section != "Settings" { // submit.Settings, embedded
			t.Errorf("LA_SUBMIT_UPLOAD: section %q, want Settings", s.Section)
		}
	}
}
