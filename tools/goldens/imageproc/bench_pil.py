#!/usr/bin/python3
"""The reference preprocessing of a 1920x1080 JPEG at in_token_limit 1024, in PIL + numpy.

Decode, convert("RGB"), the processor's rescale (bicubic to the token limit, bicubic
stretch to multiples of 28), normalize ((x/255 - 0.5)/0.5 in float32) and patchify to
[L, 3, 14, 14]: the same work as Go's BenchmarkPreprocess1080p. Run both in one sitting:

    /usr/bin/python3 tools/goldens/imageproc/bench_pil.py
    go test ./engine/imageproc -run XXX -bench Preprocess1080p -count 5

Prints the median and quartiles of per-iteration wall time in milliseconds, and the median
CPU time (on a shared machine the fairer figure; the Go benchmark reports cpu-ms/op).
"""

import io
import math
import os
import statistics
import sys
import time

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE = os.path.join(HERE, "..", "..", "..", "engine", "imageproc", "testdata", "bench_1920x1080.jpg")
PATCH, SIDE, LIMIT = 14, 28, 1024


def preprocess(data):
    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = img.size
    if (w // PATCH) * (h // PATCH) > LIMIT:
        s = math.sqrt(LIMIT / ((w // PATCH) * (h // PATCH)))
        img = img.resize((int(w * s), int(h * s)), Image.BICUBIC)
    w, h = img.size
    img = img.resize((math.ceil(w / SIDE) * SIDE, math.ceil(h / SIDE) * SIDE), Image.BICUBIC)
    a = np.asarray(img, dtype=np.uint8).astype(np.float32) / np.float32(255.0)
    a = (a - np.float32(0.5)) / np.float32(0.5)
    h, w, _ = a.shape
    gh, gw = h // PATCH, w // PATCH
    a = a.transpose(2, 0, 1).reshape(3, gh, PATCH, gw, PATCH)
    return np.ascontiguousarray(a.transpose(1, 3, 0, 2, 4)).reshape(gh * gw, 3, PATCH, PATCH), gh, gw


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    with open(IMAGE, "rb") as f:
        data = f.read()
    patches, gh, gw = preprocess(data)
    assert (gh, gw) == (24, 44) and patches.shape == (1056, 3, 14, 14), (gh, gw, patches.shape)
    times, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        preprocess(data)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    q = statistics.quantiles(times, n=4)
    print(f"PIL {Image.__version__} + numpy {np.__version__}: 1920x1080 JPEG -> grid {gh}x{gw}, "
          f"{n} runs: median {statistics.median(times):.1f} ms wall (quartiles {q[0]:.1f} .. {q[2]:.1f}), "
          f"median {statistics.median(cpu):.1f} ms CPU")


if __name__ == "__main__":
    main()
