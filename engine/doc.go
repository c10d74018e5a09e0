// Package engine holds the domain types and interfaces that the model's host side, the
// worker and the /predict server share. It has no logic of its own beyond validation
// helpers; the work is done in its sub-packages.
//
//   - Engine is what a worker and the /predict server need from a loaded model: Prepare
//     (host work: decode, preprocess, tokenize; any goroutine, concurrently), Generate
//     (device work, one call at a time per chip), Overlay, Info and Close. The split lets
//     a worker prepare the next job while the chip runs the current one.
//   - Backend is one loaded model on one device, driven step by step (Vision, Prefill,
//     Decode, Reset); engine/native implements it for the cpu and ttnn backends.
//   - Request, Prepared and Prediction (with Detection, Point and Timing) are a request
//     on its way through. Prediction is the /predict response body and part of every job
//     result.
//   - Task names a query template; Info describes a loaded engine; InputError, with its
//     Code* values, is a request refused for what it contains, which no retry can fix.
//
// The sub-packages: imageproc (decode, resize, patchify), tokenizer and prompt (the chat
// prompt and its ids), answer (generated text to boxes and points), overlay (the picture),
// checkpoint (config and safetensors), native (the C backends), chip (one owner goroutine
// per device) and pipeline, the Engine that ties them together and runs the greedy decode
// loop over a Backend.
package engine
