package native

/*
#include "la_backend.h"

// cgo can not call through C function pointers; these trampolines do.
static int la_legacy_prefill(const la_backend_ops *o, la_engine *e, int slot, const int32_t *ids, int len, int32_t *first, float *prob, char *err, size_t n) {
	return o->prefill(e, slot, ids, len, first, prob, err, n);
}
static int la_legacy_decode(const la_backend_ops *o, la_engine *e, int rows, const int32_t *slots, const int32_t *toks, int32_t *next, float *prob, char *err, size_t n) {
	return o->decode(e, rows, slots, toks, next, prob, err, n);
}
*/
import "C"

import (
	"unsafe"

	"github.com/locateanything/detect/engine"
)

// A backend built before ABI 4 finished moving onto step() still fills la_backend_ops'
// prefill and decode and its step() takes live slots only. Until it no longer does, Step
// sends it the calls those two served: a prefill of one free slot, and greedy AR rows. This
// file goes when la_backend_ops loses the two fields.

// legacy says whether the backend still has its own prefill and decode entries.
func (b *Backend) legacy() bool { return b.ops.prefill != nil && b.ops.decode != nil }

// legacyStep runs a step through the backend's prefill or decode entry when it is one of
// theirs, and reports whether it was.
func (b *Backend) legacyStep(slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow) (bool, error) {
	greedy := k == 1 && len(watch) == 0
	// A prefill: a free slot, or a prompt longer than an AR step for a live one, which the
	// backend's prefill then refuses in its own words.
	if s := slots[0]; len(slots) == 1 && len(s.Block) == 0 && (greedy || s.NoOutput) && (!b.live[s.Slot] || len(s.Pending) > 1) {
		return true, b.legacyPrefill(s, rows)
	}
	if !greedy {
		return false, nil
	}
	for _, s := range slots {
		if !b.live[s.Slot] || len(s.Block) > 0 || len(s.Pending) != 1 || s.NoOutput {
			return false, nil
		}
	}
	return true, b.legacyDecode(slots, rows)
}

func (b *Backend) legacyPrefill(s engine.StepSlot, rows []engine.StepRow) error {
	var first C.int32_t
	var prob C.float
	firstp, probp := &first, &prob
	if s.NoOutput {
		firstp, probp = nil, nil
	}
	if C.la_legacy_prefill(b.ops, b.eng, C.int(s.Slot), (*C.int32_t)(unsafe.SliceData(s.Pending)), C.int(len(s.Pending)),
		firstp, probp, b.errBuf, C.LA_ERR_LEN) != 0 {
		return b.failure("prefill")
	}
	b.live[s.Slot] = true
	if !s.NoOutput {
		rows[0].TopIDs[0], rows[0].TopProbs[0] = int32(first), float32(prob)
	}
	return nil
}

// legacyDecode runs greedy AR rows through decode(), whose next tokens and probabilities
// land in the step's C-side output buffers.
func (b *Backend) legacyDecode(slots []engine.StepSlot, rows []engine.StepRow) error {
	n := len(slots)
	b.stepTokens = b.stepTokens[:0]
	for _, s := range slots {
		b.stepTokens = append(b.stepTokens, int32(s.Slot))
	}
	for _, s := range slots {
		b.stepTokens = append(b.stepTokens, s.Pending[0])
	}
	if C.la_legacy_decode(b.ops, b.eng, C.int(n), (*C.int32_t)(unsafe.Pointer(&b.stepTokens[0])),
		(*C.int32_t)(unsafe.Pointer(&b.stepTokens[n])), b.step.topIDs, b.step.topP, b.errBuf, C.LA_ERR_LEN) != 0 {
		return b.failure("decode")
	}
	next := unsafe.Slice((*int32)(unsafe.Pointer(b.step.topIDs)), n)
	prob := unsafe.Slice((*float32)(unsafe.Pointer(b.step.topP)), n)
	for i := range slots {
		rows[i].TopIDs[0], rows[i].TopProbs[0] = next[i], prob[i]
	}
	return nil
}
