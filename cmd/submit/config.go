package main

import (
	"fmt"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/submit"
)

// loadConfig reads submit's configuration from the environment, the only place it is read.
func loadConfig() (submit.Config, error) {
	var s config.Submit
	if err := envconfig.Process("", &s); err != nil {
		return submit.Config{}, fmt.Errorf("configuration: %w", err)
	}
	c := submit.Config{NATS: s.NATS.Conn(), Storage: s.Storage.Store(), UploadPrefix: s.UploadPrefix}
	c.Finish()
	return c, nil
}
