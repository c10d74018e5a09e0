package submit

import (
	"fmt"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
)

// loadTestConfig reads the configuration from the test's environment the way cmd/submit
// does, so the tests set LA_* variables as a user would.
func loadTestConfig() (Config, error) {
	var s config.Submit
	if err := envconfig.Process("", &s); err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	c := Config{NATS: s.NATS, Storage: s.Storage, UploadPrefix: s.UploadPrefix}
	c.Finish()
	return c, nil
}
