package pipeline

import "errors"

// ErrNoFreeSlot is Start's error when MaxBatch sequences are already running.
var ErrNoFreeSlot = errors.New("no free sequence slot")

// errNoHybrid is a hybrid sequence on a Pipeline without the block tokens, which Prepare
// refuses.
var errNoHybrid = errors.New("hybrid decoding: the model has no block token ids")
