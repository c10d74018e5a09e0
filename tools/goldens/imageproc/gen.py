#!/usr/bin/python3
"""Generate the PIL parity goldens for engine/imageproc.

Run with Debian's interpreter (PIL 9.4, numpy) from the repository root:

    /usr/bin/python3 tools/goldens/imageproc/gen.py

It writes into engine/imageproc/testdata/:
  - the input images (photos from testdata/images, synthetic edge cases),
  - <case>.decoded.png: PIL's Image.open(f).convert("RGB") of the input, 8-bit RGB,
  - <case>.want.png: the 8-bit RGB image the model sees after the processor's rescale
    (in_token_limit, then the stretch to multiples of 28) and, when a canonical grid is
    set, the squash resize onto it,
  - small.patches.f32: the normalized [L,3,14,14] float32 patches of one small case,
  - goldens.json: the manifest the Go test reads.

Everything is deterministic (fixed numpy seed), so a rerun reproduces the same bytes.
"""

import json
import math
import os
import shutil
import struct
import sys
import zlib

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(ROOT, "engine", "imageproc", "testdata")
PHOTOS = os.path.join(ROOT, "testdata", "images")  # the repository's photographs
PATCH = 14
DECODED = {"dog.jpg", "ycc420.jpg", "ycc422.jpg", "ycc444.jpg", "cmyk.jpg"}
MERGE = 2


def rescale(img, limit):
    """The HF processor's rescale as docs/background.md ("Preprocessing") describes it."""
    w, h = img.size
    if (w // PATCH) * (h // PATCH) > limit:
        s = math.sqrt(limit / ((w // PATCH) * (h // PATCH)))
        img = img.resize((int(w * s), int(h * s)), Image.BICUBIC)
    w, h = img.size
    side = PATCH * MERGE
    return img.resize((math.ceil(w / side) * side, math.ceil(h / side) * side), Image.BICUBIC)


def model_view(img, limit, canon):
    img = rescale(img.convert("RGB"), limit)
    if canon is not None:
        img = img.resize((canon[1] * PATCH, canon[0] * PATCH), Image.BICUBIC)
    return img


def patches(img):
    """to_tensor + normalize(0.5, 0.5) + patchify [L,3,14,14], all float32 like torchvision."""
    a = np.asarray(img, dtype=np.uint8).astype(np.float32) / np.float32(255.0)
    a = (a - np.float32(0.5)) / np.float32(0.5)
    h, w, _ = a.shape
    gh, gw = h // PATCH, w // PATCH
    a = a.transpose(2, 0, 1).reshape(3, gh, PATCH, gw, PATCH)
    return np.ascontiguousarray(a.transpose(1, 3, 0, 2, 4)).astype("<f4")


def write_png(path, w, h, bit_depth, color_type, raw_rows):
    """A minimal PNG writer, for the 16-bit layouts PIL cannot save."""

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0)
    data = b"".join(b"\x00" + row for row in raw_rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", ihdr))
        f.write(chunk(b"IDAT", zlib.compress(data, 9)))
        f.write(chunk(b"IEND", b""))


def smooth_noise(rng, h, w, c, sigma=12):
    """Gradients plus noise plus a few hard edges: exercises rounding and clamping."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([
        127 + 120 * np.sin(x / max(w, 1) * 6.1 + c0) * np.cos(y / max(h, 1) * 3.7 + c0)
        for c0 in range(c)
    ], axis=-1)
    base += rng.normal(0, sigma, size=base.shape)
    base[(x.astype(int) // 7 + y.astype(int) // 5) % 9 == 0] = 255
    base[(x.astype(int) // 3 + y.astype(int) // 11) % 13 == 0] = 0
    return np.clip(base, 0, 255).astype(np.uint8)


def make_inputs(rng):
    """Writes the synthetic inputs; returns {file name: short description}."""
    made = {}

    def save(name, img, desc, **kw):
        img.save(os.path.join(OUT, name), **kw)
        made[name] = desc

    save("tiny_1x1.png", Image.fromarray(np.array([[[200, 30, 90]]], np.uint8)), "1x1 RGB")
    save("strip_1x300.png", Image.fromarray(smooth_noise(rng, 300, 1, 3)), "1 px wide, 300 tall")
    save("strip_300x1.png", Image.fromarray(smooth_noise(rng, 1, 300, 3)), "300 wide, 1 px tall")
    save("wide_2000x30.png", Image.fromarray(smooth_noise(rng, 30, 2000, 3)), "extreme aspect 2000x30")
    save("tall_40x1500.png", Image.fromarray(smooth_noise(rng, 1500, 40, 3)), "extreme aspect 40x1500")
    save("small_37x23.png", Image.fromarray(smooth_noise(rng, 23, 37, 3)), "upscale 37x23")
    save("big_600x450.png", Image.fromarray(smooth_noise(rng, 450, 600, 3, sigma=0)), "downscale 600x450")
    save("gray_L.png", Image.fromarray(smooth_noise(rng, 90, 130, 1)[:, :, 0], "L"), "8-bit gray")
    la = smooth_noise(rng, 60, 80, 2)
    save("gray_alpha_LA.png", Image.fromarray(la, "LA"), "8-bit gray + alpha")
    rgba = smooth_noise(rng, 70, 110, 4)
    save("rgba.png", Image.fromarray(rgba, "RGBA"), "RGBA, alpha varies (dropped by convert)")
    pal = Image.fromarray(smooth_noise(rng, 64, 96, 3)).quantize(colors=40)
    save("palette_P.png", pal, "palette, 40 colours")
    pal_t = pal.copy()
    pal_t.info["transparency"] = 3
    save("palette_trns_P.png", pal_t, "palette with a transparent index", transparency=3)
    save("palette.gif", pal, "GIF, palette")
    save("lossless.webp", Image.fromarray(smooth_noise(rng, 50, 75, 3)), "WebP lossless", lossless=True)
    save("lossy.webp", Image.fromarray(smooth_noise(rng, 50, 75, 3)), "WebP lossy", quality=80)
    cmyk = Image.fromarray(smooth_noise(rng, 48, 64, 4), "CMYK")
    save("cmyk.jpg", cmyk, "CMYK JPEG (Adobe marker)", quality=95)
    save("ycc420.jpg", Image.fromarray(smooth_noise(rng, 61, 83, 3)), "JPEG 4:2:0, odd size",
         quality=90, subsampling=2)
    save("ycc444.jpg", Image.fromarray(smooth_noise(rng, 61, 83, 3)), "JPEG 4:4:4, odd size",
         quality=90, subsampling=0)

    # 16-bit layouts written by hand (PIL cannot save them).
    g16 = (rng.integers(0, 65536, size=(40, 50))).astype(">u2")
    g16[:, :10] = rng.integers(0, 300, size=(40, 10))  # some values below 256: PIL keeps those
    write_png(os.path.join(OUT, "gray16.png"), 50, 40, 16, 0, [r.tobytes() for r in g16])
    made["gray16.png"] = "16-bit gray (PIL mode I; convert clips at 255)"
    rgb16 = (smooth_noise(rng, 45, 55, 3).astype(np.uint16) * 257
             + rng.integers(0, 257, size=(45, 55, 3)).astype(np.uint16)).astype(">u2")
    write_png(os.path.join(OUT, "rgb16.png"), 55, 45, 16, 2, [r.tobytes() for r in rgb16])
    made["rgb16.png"] = "16-bit RGB"
    rgba16 = (rng.integers(0, 65536, size=(30, 35, 4))).astype(">u2")
    write_png(os.path.join(OUT, "rgba16.png"), 35, 30, 16, 6, [r.tobytes() for r in rgba16])
    made["rgba16.png"] = "16-bit RGBA"
    save("ycc422.jpg", Image.fromarray(smooth_noise(rng, 61, 83, 3)), "JPEG 4:2:2, odd size",
         quality=90, subsampling=1)
    return made


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261202)
    for f in ("dog.jpg", "person.jpg"):
        shutil.copyfile(os.path.join(PHOTOS, f), os.path.join(OUT, f))
    # The 1080p benchmark input (4:2:0, the encoder's default), made from kite.jpg.
    Image.open(os.path.join(PHOTOS, "kite.jpg")).convert("RGB").resize((1920, 1080), Image.BICUBIC).save(
        os.path.join(OUT, "bench_1920x1080.jpg"), quality=90)
    descs = make_inputs(rng)
    descs.update({"dog.jpg": "photo 768x576, 4:4:0",
                  "person.jpg": "photo 640x424, 4:4:0", "bench_1920x1080.jpg": "1080p photo, 4:2:0"})

    cases = []

    def case(name, src, limit, canon=None):
        img = Image.open(os.path.join(OUT, src))
        # PIL's decoded RGB is stored where a Go decoder could disagree with it: lossy
        # formats (other decoders) and every non-RGB mode (PIL's convert rules). For the
        # other inputs the test decodes the lossless file itself.
        dec_name = ""
        if src in DECODED or img.mode != "RGB" or img.format == "WEBP":
            dec_name = src + ".decoded.png"
            if not os.path.exists(os.path.join(OUT, dec_name)):
                img.convert("RGB").save(os.path.join(OUT, dec_name))
        want = model_view(img, limit, canon)
        want.save(os.path.join(OUT, name + ".want.png"))
        cases.append({
            "name": name, "input": src, "what": descs[src], "format": img.format.lower(),
            "mode": img.mode, "width": img.size[0], "height": img.size[1],
            "in_token_limit": limit, "canon_grid": list(canon) if canon else [0, 0],
            "decoded": dec_name, "want": name + ".want.png",
            "want_width": want.size[0], "want_height": want.size[1],
        })
        return want

    for src in sorted(descs):
        if src in ("bench_1920x1080.jpg", "person.jpg"):
            continue
        case(src.replace(".", "_") + "_1024", src, 1024)
    case("person_25600", "person.jpg", 25600)
    case("dog_256", "dog.jpg", 256)
    case("dog_64", "dog.jpg", 64)
    case("big_256", "big_600x450.png", 256)
    case("wide_256", "wide_2000x30.png", 256)
    case("dog_canon_24x44", "dog.jpg", 1024, (24, 44))
    case("small_canon_24x44", "small_37x23.png", 1024, (24, 44))
    case("person_canon_12x12", "person.jpg", 1024, (12, 12))
    case("bench_1080p_1024", "bench_1920x1080.jpg", 1024, (24, 44))
    small = case("small_patches", "small_37x23.png", 1024)
    patches(small).tofile(os.path.join(OUT, "small.patches.f32"))

    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump({"generator": "tools/goldens/imageproc/gen.py", "pil": Image.__version__,
                   "numpy": np.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases written to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
