"""Reference image preprocessing with PIL (docs/background.md, "Preprocessing").

    patches, grid_h, grid_w = preprocess(Image.open(path), in_token_limit=1024)

RGB conversion is the upstream processor's to_rgb (fetch_image): an "RGBA" image is pasted
onto white with its alpha as the mask; every other mode, gray+alpha ("LA") and a palette
with a transparent entry included, goes through convert("RGB"), which drops the alpha.
engine/imageproc does the same (docs/images.md).
"""

import math

import numpy as np
import torch
from PIL import Image

PATCH = 14
MAX_GRID_SIDE = 512  # patches; a grid side reaching this is refused


def to_rgb(img):
    """The upstream to_rgb: RGBA pasted onto white (PIL's paste with the alpha as mask),
    anything else convert("RGB")."""
    if img.mode == "RGBA":
        white = Image.new("RGB", img.size, (255, 255, 255))
        white.paste(img, mask=img.split()[3])
        return white
    return img.convert("RGB")


def canonical_size(width, height, in_token_limit, patch=PATCH, merge=2):
    """(w1, h1, w2, h2): the size after the token-limit shrink (w1, h1, equal to the input
    when no shrink is needed) and the final size, multiples of patch*merge."""
    if width <= 0 or height <= 0:
        raise ValueError(f"image size {width}x{height}")
    w, h = width, height
    tokens = (w // patch) * (h // patch)
    if tokens > in_token_limit:
        s = math.sqrt(in_token_limit / tokens)
        w, h = int(w * s), int(h * s)
    if w <= 0 or h <= 0:
        raise ValueError(f"image {width}x{height} shrinks to {w}x{h}: aspect ratio too extreme")
    unit = patch * merge
    w2, h2 = math.ceil(w / unit) * unit, math.ceil(h / unit) * unit
    if w2 // patch >= MAX_GRID_SIDE or h2 // patch >= MAX_GRID_SIDE:
        raise ValueError(f"image {width}x{height} gives a {h2 // patch}x{w2 // patch} patch grid; a side must stay under {MAX_GRID_SIDE}")
    return w, h, w2, h2


def preprocess(img, in_token_limit, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), patch=PATCH, merge=2):
    """PIL image -> (patches float32 [gh*gw, 3, patch, patch], gh, gw, (canon_w, canon_h))."""
    img = to_rgb(img)
    w1, h1, w2, h2 = canonical_size(img.width, img.height, in_token_limit, patch, merge)
    if (w1, h1) != img.size:
        img = img.resize((w1, h1), Image.BICUBIC)
    if (w2, h2) != img.size:
        img = img.resize((w2, h2), Image.BICUBIC)
    x = np.asarray(img, dtype=np.float32) / 255.0  # [H, W, 3]
    x = (x - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    gh, gw = h2 // patch, w2 // patch
    x = x.reshape(gh, patch, gw, patch, 3).transpose(0, 2, 4, 1, 3)  # gh, gw, c, row, col
    patches = np.ascontiguousarray(x.reshape(gh * gw, 3, patch, patch), dtype=np.float32)
    return torch.from_numpy(patches), gh, gw, (w2, h2)
