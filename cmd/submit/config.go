package main

import (
	"fmt"
	"os"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
)

// loadConfig reads submit's configuration from the environment, the only place it is read,
// and resolves and validates it (config.Submit.Finish). A misspelt LA_* variable is an
// error naming the closest known one, as for the worker; the worker's variables share the
// shell and are accepted.
func loadConfig() (config.Submit, error) {
	known := append(config.Names(config.Worker{}, config.Submit{}), config.OtherTools()...)
	if err := config.Unknown(os.Environ(), known); err != nil {
		return config.Submit{}, fmt.Errorf("configuration: %w", err)
	}
	return readConfig()
}

// readConfig fills and finishes the configuration from the environment's LA_* variables.
func readConfig() (config.Submit, error) {
	var c config.Submit
	if err := envconfig.Process("", &c); err != nil {
		return config.Submit{}, fmt.Errorf("configuration: %w", err)
	}
	if err := c.Finish(); err != nil {
		return config.Submit{}, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}
