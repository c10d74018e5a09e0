// Package blockdecode is the acceptance logic of parallel box decoding, LocateAnything's
// "hybrid" generation (docs/hybrid-decoding.md): how the six rows of a block step are read
// (a whole box, a label, or each row's argmax), what a block commits and whether decoding
// drops to one token per step, what a one-token step in hybrid mode means, and the stop
// rules. The functions are pure: they read engine.StepRow values (each row's top K ids and
// the probabilities of the ids Tokens.Watch lists), which is all a backend's Step returns.
//
// The rules follow the PyTorch reference, tools/refmodel/hybrid.py, name for name: Read is
// read_block (with is_valid_box_frame, decode_bbox_avg and decode_ref), HandlePattern is
// handle_pattern, ClassifyAR is classify_ar, and Block and AR add generate's stop rules.
// Probabilities are compared in float32 against float32 thresholds, exactly as upstream's
// torch comparisons round their Python constants.
package blockdecode
