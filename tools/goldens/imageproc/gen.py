#!/usr/bin/python3
"""Generate the PIL parity goldens for engine/imageproc.

Run with Debian's interpreter (PIL 9.4 on libjpeg-turbo 2.1, numpy) from the repository
root, on a machine with a C compiler and libjpeg62-turbo-dev (for jpegenc.c, which writes
the JPEG layouts PIL's encoder cannot):

    /usr/bin/python3 tools/goldens/imageproc/gen.py

It writes into engine/imageproc/testdata/:
  - the input images (photos from testdata/images, synthetic edge cases),
  - <input>.decoded.png: the upstream processor's to_rgb of PIL's Image.open(f), 8-bit
    RGB (an "RGBA" image pasted onto white, any other mode convert("RGB")); for inputs
    over DIGEST_PIXELS only its sha256 (decoded_sha256 in the manifest), to keep the
    repository small; for RGB PNGs neither (the file is its own golden),
  - <case>.want.png: the 8-bit RGB image the model sees after the processor's rescale
    (in_token_limit, then the stretch to multiples of 28) and, when a canonical grid is
    set, the squash resize onto it,
  - small.patches.f32: the normalized [L,3,14,14] float32 patches of one small case,
  - goldens.json: the manifest the Go test reads.

Everything is deterministic (fixed numpy seed), so a rerun reproduces the same bytes.
"""

import hashlib
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(ROOT, "engine", "imageproc", "testdata")
PHOTOS = os.path.join(ROOT, "testdata", "images")  # the repository's photographs
PATCH = 14
MERGE = 2
DIGEST_PIXELS = 400_000  # larger decoded goldens are stored as a sha256 of the samples
HERE = os.path.dirname(os.path.abspath(__file__))


def to_rgb(img):
    """The upstream processor's to_rgb: RGBA pasted onto white with its alpha as the mask
    (PIL's blend arithmetic), every other mode convert("RGB"), which drops alpha."""
    if img.mode == "RGBA":
        white = Image.new("RGB", img.size, (255, 255, 255))
        white.paste(img, mask=img.split()[3])
        return white
    return img.convert("RGB")


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
    img = rescale(to_rgb(img), limit)
    if canon is not None:
        img = img.resize((canon[1] * PATCH, canon[0] * PATCH), Image.BICUBIC)
    return plain(img)


def plain(img):
    """The same RGB samples without the info (a transparency colour) PIL would save."""
    return Image.frombytes("RGB", img.size, img.tobytes())


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


def write_png_chunks(path, w, h, bit_depth, color_type, raw_rows, extra=b""):
    """write_png with extra chunks (already framed) before the image data."""
    write_png(path, w, h, bit_depth, color_type, raw_rows)
    with open(path, "rb") as f:
        data = f.read()
    ihdr_end = 8 + 8 + 13 + 4
    with open(path, "wb") as f:
        f.write(data[:ihdr_end] + extra + data[ihdr_end:])


def png_chunk(kind, data):
    c = struct.pack(">I", len(data)) + kind + data
    return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


class JpegEnc:
    """jpegenc.c, compiled once into a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="jpegenc")
        self.exe = os.path.join(self.dir, "jpegenc")
        subprocess.run(["cc", "-O2", "-o", self.exe, os.path.join(HERE, "jpegenc.c"), "-ljpeg"], check=True)

    def encode(self, path, pixels, layout, space, quality, sampling, *opts):
        h, w = pixels.shape[:2]
        out = subprocess.run([self.exe, str(w), str(h), layout, space, str(quality), sampling, *opts],
                             input=np.ascontiguousarray(pixels, np.uint8).tobytes(),
                             stdout=subprocess.PIPE, check=True).stdout
        with open(path, "wb") as f:
            f.write(out)

    def close(self):
        shutil.rmtree(self.dir)


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
    made.update(make_jpeg_inputs(rng))
    made.update(make_alpha_inputs(rng))
    made.update(make_palette_inputs(rng))
    return made


def make_palette_inputs(rng):
    """A PNG whose pixels use indices past its PLTE (PIL: its default ramp, (i, i, i))."""
    idx = rng.integers(0, 256, size=(20, 30)).astype(np.uint8)
    idx[:, :10] = rng.integers(0, 6, size=(20, 10))
    plte = png_chunk(b"PLTE", bytes(rng.integers(0, 256, size=18).astype(np.uint8)))
    write_png_chunks(os.path.join(OUT, "palette_oob.png"), 30, 20, 8, 3, [r.tobytes() for r in idx], plte)
    return {"palette_oob.png": "palette PNG with indices past its 6-entry PLTE"}


def make_jpeg_inputs(rng):
    """JPEG layouts beyond PIL's encoder (jpegenc.c) and PIL's own variants."""
    made = {}
    enc = JpegEnc()
    try:
        def jenc(name, desc, pixels, layout, space, quality, sampling, *opts):
            enc.encode(os.path.join(OUT, name), pixels, layout, space, quality, sampling, *opts)
            made[name] = desc

        rgb = lambda h, w: smooth_noise(rng, h, w, 3)
        jenc("ycc440.jpg", "JPEG 4:4:0, odd size", rgb(61, 83), "rgb", "ycbcr", 90, "1x2,1x1,1x1")
        jenc("ycc411.jpg", "JPEG 4:1:1, odd size", rgb(61, 83), "rgb", "ycbcr", 90, "4x1,1x1,1x1")
        jenc("ycc410.jpg", "JPEG 4:1:0, odd size", rgb(61, 83), "rgb", "ycbcr", 90, "4x2,1x1,1x1")
        jenc("ycc_mixed.jpg", "JPEG Cb 2x1, Cr 1x2 of a 2x2 luma, odd size", rgb(61, 83), "rgb", "ycbcr", 90,
             "2x2,2x1,1x2")
        jenc("progressive444.jpg", "progressive JPEG 4:4:4", rgb(57, 91), "rgb", "ycbcr", 85, "1x1,1x1,1x1",
             "progressive")
        jenc("gray_progressive.jpg", "progressive grayscale JPEG", smooth_noise(rng, 45, 67, 1), "gray", "gray",
             80, "1x1", "progressive")
        jenc("rgb.jpg", "JPEG stored as RGB (Adobe transform 0)", rgb(40, 52), "rgb", "rgb", 90, "1x1,1x1,1x1")
        jenc("ycck.jpg", "YCCK JPEG (Adobe transform 2)", smooth_noise(rng, 43, 59, 4), "cmyk", "ycck", 90,
             "2x2,1x1,1x1,2x2")
        jenc("cmyk_noadobe.jpg", "CMYK JPEG without an Adobe marker", smooth_noise(rng, 38, 45, 4), "cmyk",
             "cmyk", 90, "1x1,1x1,1x1,1x1", "noadobe")
        jenc("restart.jpg", "JPEG 4:2:0 with a restart marker every MCU row", rgb(75, 101), "rgb", "ycbcr", 90,
             "2x2,1x1,1x1", "restart=1")
        jenc("restart_progressive.jpg", "progressive JPEG 4:2:0 with restart markers", rgb(75, 101), "rgb",
             "ycbcr", 90, "2x2,1x1,1x1", "progressive", "restart=2")
        jenc("arith.jpg", "arithmetic-coded JPEG 4:2:0", rgb(50, 70), "rgb", "ycbcr", 90, "2x2,1x1,1x1", "arith")
    finally:
        enc.close()

    def save(name, img, desc, **kw):
        img.save(os.path.join(OUT, name), **kw)
        made[name] = desc

    save("progressive.jpg", Image.fromarray(smooth_noise(rng, 71, 97, 3)), "progressive JPEG 4:2:0, odd size",
         quality=88, progressive=True)
    save("gray.jpg", Image.fromarray(smooth_noise(rng, 53, 77, 1)[:, :, 0], "L"), "grayscale JPEG, odd size",
         quality=90)
    save("lowq.jpg", Image.fromarray(smooth_noise(rng, 64, 96, 3)), "JPEG at quality 5", quality=5)
    save("tiny_1x1.jpg", Image.fromarray(np.array([[[200, 30, 90]]], np.uint8)), "1x1 JPEG 4:2:0", quality=90)
    save("strip_33x2.jpg", Image.fromarray(smooth_noise(rng, 2, 33, 3)), "33x2 JPEG 4:2:0", quality=90)
    return made


def make_alpha_inputs(rng):
    """Transparency in every form to_rgb meets: composited ("RGBA") or dropped."""
    made = {}

    def save(name, img, desc, **kw):
        img.save(os.path.join(OUT, name), **kw)
        made[name] = desc

    la16 = rng.integers(0, 65536, size=(33, 41, 2)).astype(">u2")
    write_png(os.path.join(OUT, "gray_alpha16.png"), 41, 33, 16, 4, [r.tobytes() for r in la16])
    made["gray_alpha16.png"] = "16-bit gray + alpha (PIL LA: alpha dropped)"
    rgb = smooth_noise(rng, 40, 50, 3)
    rgb[::3, ::4] = (12, 200, 34)
    save("rgb_trns.png", Image.fromarray(rgb), "RGB with a tRNS colour (dropped by convert)",
         transparency=(12, 200, 34))
    gray = smooth_noise(rng, 40, 50, 1)[:, :, 0]
    gray[::5, ::2] = 77
    save("gray_trns.png", Image.fromarray(gray, "L"), "gray with a tRNS value (dropped)", transparency=77)
    g16 = rng.integers(0, 65536, size=(30, 44)).astype(">u2")
    g16[:, :12] = rng.integers(0, 300, size=(30, 12))
    g16[::4, ::3] = 200
    write_png_chunks(os.path.join(OUT, "gray16_trns.png"), 44, 30, 16, 0, [r.tobytes() for r in g16],
                     png_chunk(b"tRNS", struct.pack(">H", 200)))
    made["gray16_trns.png"] = "16-bit gray with tRNS (PIL mode I: clipped, transparency dropped)"
    rgba = smooth_noise(rng, 45, 60, 4)
    rgba[:8, :, 3] = 0
    rgba[8:16, :, 3] = 255
    save("rgba_lossless.webp", Image.fromarray(rgba, "RGBA"), "WebP lossless with alpha (composited)",
         lossless=True)
    save("rgba_lossy.webp", Image.fromarray(smooth_noise(rng, 45, 60, 4), "RGBA"), "WebP lossy with alpha (composited)",
         quality=80)

    pal = Image.fromarray(smooth_noise(rng, 40, 56, 3)).quantize(colors=30)
    save("palette_trns.gif", pal, "GIF with a transparent index (kept as its colour)", transparency=5)
    # The first frame smaller than the logical screen, offset into it, with and without a
    # transparent index; and a frame reaching past the screen (PIL grows the image).
    buf = io.BytesIO()
    pal.save(buf, "GIF")
    base = buf.getvalue()
    made.update(gif_variant("gif_small_frame.gif", base, (70, 60), (9, 7), None,
                            "GIF whose first frame is smaller than the screen"))
    made.update(gif_variant("gif_small_frame_trns.gif", base, (70, 60), (3, 11), 7,
                            "GIF, first frame smaller than the screen, transparent index"))
    made.update(gif_variant("gif_frame_outside.gif", base, (50, 30), (4, 2), 250,
                            "GIF whose first frame reaches past the screen; transparent index past the palette"))
    return made


def gif_variant(name, base, screen, offset, transparency, desc):
    """Rewrites a one-frame GIF from PIL: logical screen size, frame offset, and a graphic
    control extension with a transparent index."""
    data = bytearray(base)
    data[6:10] = struct.pack("<HH", *screen)
    pos = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
    while data[pos] == 0x21:  # skip PIL's extensions
        pos += 2
        while data[pos]:
            pos += 1 + data[pos]
        pos += 1
    assert data[pos] == 0x2C, "image descriptor expected"
    data[pos + 1:pos + 5] = struct.pack("<HH", *offset)
    if transparency is not None:
        data[pos:pos] = bytes([0x21, 0xF9, 4, 1, 0, 0, transparency, 0])
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    return {name: desc}


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261202)
    # The 1080p benchmark input (4:2:0, the encoder's default), made from kite.jpg.
    Image.open(os.path.join(PHOTOS, "kite.jpg")).convert("RGB").resize((1920, 1080), Image.BICUBIC).save(
        os.path.join(OUT, "bench_1920x1080.jpg"), quality=90)
    descs = make_inputs(rng)
    descs["bench_1920x1080.jpg"] = "1080p photo, 4:2:0"
    # The photographs are read where they are: the manifest names them relative to OUT.
    photo = lambda f: os.path.relpath(os.path.join(PHOTOS, f), OUT)
    descs.update({photo("dog.jpg"): "photo 768x576, 4:4:0", photo("person.jpg"): "photo 640x424, 4:4:0",
                  photo("kite.jpg"): "photo 1352x900, 4:4:4"})

    cases = []

    def case(name, src, limit, canon=None):
        img = Image.open(os.path.join(OUT, src))
        # PIL's decoded RGB (to_rgb) is stored for every input but an RGB PNG, which is
        # its own golden: as a PNG, or as a digest of the samples for a large one.
        dec_name, dec_sha = "", ""
        if img.format != "PNG" or img.mode != "RGB":
            dec = plain(to_rgb(img))
            if dec.size[0] * dec.size[1] > DIGEST_PIXELS:
                dec_sha = hashlib.sha256(dec.tobytes()).hexdigest()
            else:
                dec_name = os.path.basename(src) + ".decoded.png"
                dec.save(os.path.join(OUT, dec_name))
        want = model_view(img, limit, canon)
        want.save(os.path.join(OUT, name + ".want.png"))
        cases.append({
            "name": name, "input": src, "what": descs[src], "format": img.format.lower(),
            "mode": img.mode, "width": img.size[0], "height": img.size[1],
            "in_token_limit": limit, "canon_grid": list(canon) if canon else [0, 0],
            "decoded": dec_name, "decoded_sha256": dec_sha, "want": name + ".want.png",
            "want_width": want.size[0], "want_height": want.size[1],
        })
        return want

    for src in sorted(descs):
        if src in ("bench_1920x1080.jpg", photo("person.jpg"), photo("kite.jpg")):
            continue
        case(os.path.basename(src).replace(".", "_") + "_1024", src, 1024)
    case("person_25600", photo("person.jpg"), 25600)
    case("dog_256", photo("dog.jpg"), 256)
    case("dog_64", photo("dog.jpg"), 64)
    case("big_256", "big_600x450.png", 256)
    case("wide_256", "wide_2000x30.png", 256)
    case("dog_canon_24x44", photo("dog.jpg"), 1024, (24, 44))
    case("small_canon_24x44", "small_37x23.png", 1024, (24, 44))
    case("person_canon_12x12", photo("person.jpg"), 1024, (12, 12))
    case("bench_1080p_1024", "bench_1920x1080.jpg", 1024, (24, 44))
    case("kite_256", photo("kite.jpg"), 256)
    case("kite_canon_24x44", photo("kite.jpg"), 1024, (24, 44))
    case("rgba_canon_24x44", "rgba.png", 1024, (24, 44))
    small = case("small_patches", "small_37x23.png", 1024)
    patches(small).tofile(os.path.join(OUT, "small.patches.f32"))

    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump({"generator": "tools/goldens/imageproc/gen.py", "pil": Image.__version__,
                   "numpy": np.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases written to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
