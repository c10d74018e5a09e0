package jobs

import (
	"fmt"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/engine/overlay"
)

// overlayEncoder encodes the overlays of every Runner in the process; it pools its PNG
// buffers and is safe for concurrent use.
var overlayEncoder = overlay.NewEncoder()

// drawOverlay draws pred on the decoded original and encodes the picture as f.
//
// The runner draws a job's overlay itself instead of calling engine.Engine.Overlay: that
// method returns PNG bytes (the /predict contract), so a JPEG would cost a PNG encode and
// decode first, and its signature stays as it is. The picture is the one the engine
// draws: the pipeline's Overlay is overlay.Draw on the same image, encoded as PNG.
func drawOverlay(prep *engine.Prepared, pred *engine.Prediction, f overlay.Format) ([]byte, error) {
	if prep == nil || pred == nil {
		return nil, fmt.Errorf("nothing prepared or predicted")
	}
	src := prep.Image
	if src == nil {
		// An engine that does not keep the decoded original (the test double reads the
		// header only): decode the request's bytes, which Prepare accepted.
		img, _, err := imageproc.Decode(prep.Request.Image, 0)
		if err != nil {
			return nil, err
		}
		src = img
	}
	return overlayEncoder.Encode(overlay.Options{Simulated: pred.Simulated}.Draw(src, pred.Detections, pred.Points), f)
}
