#!/usr/bin/python3
"""Golden inputs and outputs of the reference model for backend parity tests.

    gen_goldens.py --checkpoint testdata/checkpoints/tiny-bf16

For each case of the checkpoint (a photo at a small in_token_limit and a query) it writes
into <checkpoint>/goldens/:

  <case>.patches.f32           inputs: normalized patches [L, 3, 14, 14] from preprocess.py
  <case>.prompt.i32            inputs: prompt ids [S] (prompt.py; N = grid_h*grid_w/4 image slots)
  <case>.pos_emb.f32           debug: position embedding resized to the grid [L, C_vision]
  <case>.vision_features.f32   debug: vision tower output after final_layernorm [L, C_vision]
  <case>.image_embeddings.f32  outputs: after merge and projector [N, C_text]
  <case>.prefill_logits.f32    outputs: logits of the last prompt position [vocab]
  index.json                   grids, shapes, file names, and 16 greedy ids with the
                               top1 - top2 logit margin of each step

All binaries are raw little-endian arrays, no header; index.json gives dtype and shape.
Greedy ids: ids[0] is the argmax of the prefill logits (what a backend's prefill returns),
ids[i] the argmax after feeding ids[i-1]; decoding does not stop at EOS.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import load_checkpoint  # noqa: E402
from preprocess import preprocess  # noqa: E402
from prompt import PromptBuilder  # noqa: E402

GREEDY_STEPS = 16
IMAGES = os.path.join(HERE, "testdata", "images")
ENCODINGS = os.path.join(HERE, "testdata", "golden-encodings.jsonl")

DETECT_CAR = "Locate all the instances that matches the following description: car."
DETECT_TWO = "Locate all the instances that matches the following description: person</c>car."
GROUND_MANY = "Locate all the instances that match the following description: the man in a red shirt."
GROUND_ONE = "Locate a single instance that matches the following description: the leftmost dog."
POINT = "Point to: the cat's left ear."

# name -> (photo, in_token_limit, query). Each checkpoint has one case whose grid equals
# its pos-emb grid (no interpolation) and others that force the bicubic resize.
CASES = {
    "tiny-bf16": [
        ("giraffe-8x8", "giraffe.jpg", 49, DETECT_CAR),    # exactly the 8x8 pos-emb grid
        ("dog-8x10", "dog.jpg", 64, DETECT_TWO),
        ("horses-14x20", "horses.jpg", 256, GROUND_MANY),
    ],
    "tiny-f32": [
        ("dog-8x10", "dog.jpg", 64, GROUND_ONE),           # exactly the 8x10 pos-emb grid
        ("giraffe-8x8", "giraffe.jpg", 49, POINT),
        ("person-10x16", "person.jpg", 128, DETECT_TWO),
    ],
}


def write_array(out_dir, file_name, t, dtype):
    a = np.ascontiguousarray(t.detach().cpu().numpy(), dtype=dtype)
    with open(os.path.join(out_dir, file_name), "wb") as f:
        f.write(a.tobytes())
    return {"file": file_name, "dtype": {"<f4": "float32", "<i4": "int32"}[dtype], "shape": list(a.shape)}


@torch.no_grad()
def generate(ckpt_dir, cases):
    model = load_checkpoint(ckpt_dir)
    cfg = model.cfg
    builder = PromptBuilder(os.path.join(ckpt_dir, "added_tokens.json"), ENCODINGS)
    out_dir = os.path.join(ckpt_dir, "goldens")
    os.makedirs(out_dir, exist_ok=True)
    index = {
        "format_version": 1,
        "checkpoint": os.path.basename(os.path.normpath(ckpt_dir)),
        "generator": "tools/refmodel/gen_goldens.py (PyTorch, float32 compute)",
        "greedy_steps": GREEDY_STEPS,
        "cases": [],
    }
    for name, photo, limit, query in cases:
        img = Image.open(os.path.join(IMAGES, photo))
        pp = cfg.preprocessor
        patches, gh, gw, (cw, ch) = preprocess(img, limit, pp.image_mean, pp.image_std,
                                               cfg.vision.patch_size, cfg.vision.merge_kernel)
        n_img = (gh // cfg.vision.merge_kernel) * (gw // cfg.vision.merge_kernel)
        ids = torch.tensor(builder.build(query, n_img), dtype=torch.int64)

        pos = model.vision_model.patch_embed.pos_emb(gh, gw)
        feats = model.vision_features(patches, gh, gw)
        emb = model.encode_image(patches, gh, gw)
        tokens, margins, logits = model.greedy(ids, emb, GREEDY_STEPS)

        files = {
            "patches": write_array(out_dir, f"{name}.patches.f32", patches, "<f4"),
            "prompt_ids": write_array(out_dir, f"{name}.prompt.i32", ids, "<i4"),
            "pos_emb": write_array(out_dir, f"{name}.pos_emb.f32", pos, "<f4"),
            "vision_features": write_array(out_dir, f"{name}.vision_features.f32", feats, "<f4"),
            "image_embeddings": write_array(out_dir, f"{name}.image_embeddings.f32", emb, "<f4"),
            "prefill_logits": write_array(out_dir, f"{name}.prefill_logits.f32", logits, "<f4"),
        }
        index["cases"].append({
            "name": name,
            "image": photo,
            "image_size": [img.width, img.height],
            "in_token_limit": limit,
            "canonical_size": [cw, ch],
            "grid_h": gh,
            "grid_w": gw,
            "pos_emb_interpolated": (gh, gw) != (cfg.vision.pos_emb_height, cfg.vision.pos_emb_width),
            "num_image_tokens": n_img,
            "prompt_len": len(ids),
            "query": query,
            "files": files,
            "greedy_ids": tokens,
            "greedy_margins": [round(m, 6) for m in margins],
        })
        print(f"{name}: grid {gh}x{gw}, {len(ids)} prompt ids, greedy {tokens[:6]}..., "
              f"min margin {min(margins):.4f}")
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="checkpoint directory (tiny-bf16 or tiny-f32)")
    args = ap.parse_args()
    name = os.path.basename(os.path.normpath(args.checkpoint))
    if name not in CASES:
        ap.error(f"no golden cases for checkpoint {name!r} (have {', '.join(CASES)})")
    torch.set_num_threads(1)  # deterministic reduction order
    generate(args.checkpoint, CASES[name])


if __name__ == "__main__":
    main()
