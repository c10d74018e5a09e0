// Package engine holds the domain types and interfaces that the model's host side, the
// worker and the /predict server share. It has no logic of its own beyond validation
// helpers; the work is done in its sub-packages.
//
//   - Engine is what a worker and the /predict server need from a loaded model: Prepare
//     (host work: decode, preprocess, tokenize; any goroutine, concurrently), Generate
//     (device work, one call at a time per chip), Overlay, Info and Close. The split lets
//     a worker prepare the next job while the chip runs the current one.
//   - Backend is one loaded model on one device with MaxBatch sequence slots, driven step
//     by step through one entry point, Step (a prefill, AR rows and parallel box
//     decoding's blocks are all steps), besides Vision, Release and Reset; engine/native
//     implements it for the cpu and ttnn backends, engine/sim for a simulated chip.
//   - Batcher is an Engine that runs several requests at once (Start, Step, Finish):
//     engine/chip drives it with continuous batching; Sequence is one running request.
//   - Request, Prepared and Prediction (with Detection, Point and Timing) are a request
//     on its way through. Prediction is a plain value: the /predict response (httpcompat)
//     and job results (jobs) each own the JSON they write from it.
//   - GenerationMode says how a request is decoded: ar (one token per step) or hybrid
//     (docs/hybrid-decoding.md).
//   - Task names a query template; Info describes a loaded engine; InputError, with its
//     Code* values, is a request refused for what it contains, which no retry can fix.
//
// The sub-packages: imageproc (decode, resize, patchify), tokenizer and prompt (the chat
// prompt and its ids), answer (generated text to boxes and points), blockdecode (the
// acceptance rules of parallel box decoding), overlay (the picture),
// checkpoint (config and safetensors), native (the C backends), sim (a simulated chip),
// chip (one owner goroutine per device, continuous batching) and pipeline, the Engine and
// Batcher that ties them together and runs the decode loops over a Backend.
package engine
