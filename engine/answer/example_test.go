package answer_test

import (
	"fmt"

	"github.com/locateanything/detect/engine/answer"
)

func ExampleParse() {
	raw := "<ref>car</ref><box><282><414><606><794></box><ref>dog</ref><box>None</box><ref>ear</ref><box><500><250></box><|im_end|>"
	dets, pts := answer.Parse(raw, 1920, 1080)
	for _, d := range dets {
		fmt.Println(d.Label, d.Box, d.BoxNorm)
	}
	for _, p := range pts {
		fmt.Println(p.Label, p.Point, p.PointNorm)
	}
	// Output:
	// car [541.44 447.12 1163.52 857.52] [282 414 606 794]
	// ear [960 270] [500 250]
}
