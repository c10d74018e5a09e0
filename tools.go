//go:build tools

// This file pins the modules the packages below are being built on, so that
// `go mod tidy` keeps them while the packages that import them are in progress.
package tools

import (
	_ "github.com/kelseyhightower/envconfig"
	_ "github.com/lmittmann/tint"
	_ "github.com/minio/minio-go/v7"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "golang.org/x/image/webp"
	_ "golang.org/x/text/unicode/norm"
)
