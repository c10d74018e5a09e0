package sim_test

import "github.com/locateanything/detect/engine/enginetest"

// The tests' three ways of driving a slot through Step, shared with the other backends'
// tests (engine/enginetest/steps.go).
var (
	prefillStep      = enginetest.PrefillStep
	prefillCacheStep = enginetest.PrefillCacheStep
	decodeStep       = enginetest.DecodeStep
)
