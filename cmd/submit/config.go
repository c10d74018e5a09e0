package main

import (
	"fmt"
	"os"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/submit"
)

// loadConfig reads submit's configuration from the environment, the only place it is read.
// A misspelt LA_* variable is an error naming the closest known one, as for the worker;
// the worker's variables share the shell and are accepted.
func loadConfig() (submit.Config, error) {
	known := append(config.Names(config.Worker{}, config.Submit{}), config.OtherTools()...)
	if err := config.Unknown(os.Environ(), known); err != nil {
		return submit.Config{}, fmt.Errorf("configuration: %w", err)
	}
	var s config.Submit
	if err := envconfig.Process("", &s); err != nil {
		return submit.Config{}, fmt.Errorf("configuration: %w", err)
	}
	switch {
	case s.NATS.Timeout <= 0:
		return submit.Config{}, fmt.Errorf("configuration: LA_NATS_TIMEOUT is %s, want a positive duration", s.NATS.Timeout)
	case s.Storage.MaxImageBytes <= 0:
		return submit.Config{}, fmt.Errorf("configuration: LA_MAX_IMAGE_BYTES is %d, want at least 1", s.Storage.MaxImageBytes)
	}
	c := submit.Config{NATS: s.NATS, Storage: s.Storage, UploadPrefix: s.UploadPrefix}
	c.Finish()
	return c, nil
}
