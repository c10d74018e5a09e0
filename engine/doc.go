// Package engine is the host side of LocateAnything: everything about the model that is
// not matrix arithmetic. It turns image bytes and a query into token ids (sub-packages
// imageproc, tokenizer, prompt), drives a native Backend through the greedy decode loop,
// and turns the generated tokens back into boxes, points and an overlay (sub-packages
// answer, overlay).
//
// The split between Prepare (host work, runs anywhere and in parallel) and Generate
// (device work, one call at a time per chip) lets a worker prepare the next job while
// the chip runs the current one.
package engine
