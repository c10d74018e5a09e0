#!/usr/bin/python3
"""Goldens for `worker preprocess`: PIL's canonical image of real and synthetic inputs.

Run with Debian's interpreter (PIL 9.4, numpy) from the repository root, after gen.py
(whose synthetic inputs it reuses):

    /usr/bin/python3 tools/goldens/imageproc/gen_preprocess.py

For each input, token limit (256, 1024) and grid (native, 24x44) it computes what the
upstream processor gives the model, before normalisation: Image.open, to_rgb (an "RGBA"
image pasted onto white, anything else convert("RGB")), the rescale to the token limit
and the stretch to multiples of 28 with PIL's bicubic, then the squash onto the grid. It
writes engine/imageproc/testdata/preprocess/goldens.json: per case the command line's
settings, the fields the command prints, and the sha256 of the canonical image's RGB
samples (row-major), which cmd/worker's test compares with the PNG the command writes.
"""

import hashlib
import json
import math
import os
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen import model_view  # noqa: E402  (to_rgb, rescale, squash)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
OUT = os.path.join(ROOT, "engine", "imageproc", "testdata", "preprocess")
PATCH, MERGE = 14, 2
INPUTS = [
    "testdata/images/dog.jpg", "testdata/images/person.jpg", "testdata/images/kite.jpg",
    # synthetic inputs written by gen.py: every JPEG layout family, alpha, palettes, GIF
    # canvases, 16-bit, extreme aspects
] + ["engine/imageproc/testdata/" + f for f in (
    "bench_1920x1080.jpg", "ycc420.jpg", "ycc440.jpg", "ycc411.jpg", "progressive.jpg", "restart.jpg",
    "gray.jpg", "cmyk.jpg", "ycck.jpg", "rgb.jpg", "lowq.jpg", "tiny_1x1.jpg", "rgba.png",
    "gray_alpha_LA.png", "gray_alpha16.png", "rgba16.png", "gray16_trns.png", "palette_trns_P.png",
    "palette_trns.gif", "gif_small_frame_trns.gif", "gif_frame_outside.gif", "rgba_lossy.webp",
    "rgba_lossless.webp", "lossy.webp", "wide_2000x30.png", "tall_40x1500.png", "strip_1x300.png",
)]


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = []
    for path in INPUTS:
        img = Image.open(os.path.join(ROOT, path))
        for limit in (256, 1024):
            for grid in ("native", "24x44"):
                canon = None if grid == "native" else (24, 44)
                view = model_view(img, limit, canon)
                w, h = view.size
                gh, gw = h // PATCH, w // PATCH
                cases.append({
                    "image": path, "in_token_limit": limit, "grid": grid,
                    "width": img.size[0], "height": img.size[1],
                    "canonical_size": [w, h], "grid_hw": [gh, gw],
                    "num_image_tokens": gh * gw // (MERGE * MERGE),
                    "sha256": hashlib.sha256(np.asarray(view, dtype=np.uint8).tobytes()).hexdigest(),
                })
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump({"generator": "tools/goldens/imageproc/gen_preprocess.py", "pil": Image.__version__,
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases written to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
