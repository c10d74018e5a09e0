package jobs

import (
	"context"
)

// removeOrphanOverlay deletes the overlay stored for res when its result cannot be stored
// beside it (the job's output changed under the job: a folder swapped for a link out of
// the roots, say): the result that is stored elsewhere says the job failed and names no
// overlay, so the picture would be an orphan no result points to. Best effort: the store
// refuses to delete through a link or outside its roots, and a failure is only logged.
func (s *sink) removeOrphanOverlay(ctx context.Context, res *Result) {
	if res.OverlayURL == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := s.store.Delete(ctx, *res.OverlayURL); err != nil {
		s.log.Warn("overlay left without a result: could not remove it", "id", res.ID, "overlay", *res.OverlayURL, "err", err)
	}
}
