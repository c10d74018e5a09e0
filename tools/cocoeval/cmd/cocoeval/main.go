// Command cocoeval prints the COCO box metrics of a results file against a ground-truth
// dataset, as pycocotools' COCOeval.summarize prints them:
//
//	go run ./tools/cocoeval/cmd/cocoeval GROUND_TRUTH.json RESULTS.json
//
// RESULTS.json is a list of {image_id, category_id, bbox, score}, such as the
// detections.results.json that `submit --coco` writes.
package main

import (
	"fmt"
	"os"

	"github.com/locateanything/detect/tools/cocoeval"
)

func main() {
	const usage = "usage: cocoeval GROUND_TRUTH.json RESULTS.json"
	if len(os.Args) == 2 && (os.Args[1] == "-h" || os.Args[1] == "--help") {
		fmt.Println(usage)
		return
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	gt, err := cocoeval.ReadDataset(os.Args[1])
	if err != nil {
		fail(err)
	}
	dets, err := cocoeval.ReadResults(os.Args[2])
	if err != nil {
		fail(err)
	}
	stats, err := cocoeval.Evaluate(gt, dets)
	if err != nil {
		fail(err)
	}
	fmt.Print(stats)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cocoeval:", err)
	os.Exit(1)
}
