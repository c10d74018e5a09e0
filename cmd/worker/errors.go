package main

import "errors"

// The error kinds of the worker's commands besides cli.UsageError (exit 2).

// errSmokeFailed is what runSmoke returns after it has printed its FAIL line; the caller
// exits non-zero without printing more.
var errSmokeFailed = errors.New("smoke test failed")
