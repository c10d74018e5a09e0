#!/usr/bin/python3
"""Goldens for parallel box decoding (hybrid.py), for the engine's port to test against.
Written to tools/refmodel/testdata/hybrid/ (format: docs/hybrid-decoding.md, "Goldens"):

  decisions.json   hand-made block probability rows, each with what every rule makes of
                   it in hybrid and fast mode (no model needed: tests the acceptance logic)
  tiny-bf16.json   the random test checkpoints' golden cases (gen_goldens.py: same photo,
  tiny-f32.json    token limit and query) generated in hybrid and fast mode, step by step
  tiny-shapes-blocks.json
                   tiny-shapes-blocks/ (tiny-shapes fine-tuned with the block objective, a
                   test model: README there) on the held-out shape scenes, step by step, in
                   hybrid mode, with its slow (one token a step) answer beside it
  tiny-shapes.json the bundled model (models/tiny-shapes) on the same scenes, the same way

    gen_hybrid_goldens.py             # all of them
    gen_hybrid_goldens.py --only-shapes     # the two shape-model files
    gen_hybrid_goldens.py --only-bundled    # tiny-shapes.json alone

Deterministic: the same torch gives the same bytes (one thread, fixed tie rule).
"""

import argparse
import json
import os
import sys

import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_goldens  # noqa: E402
import hybrid as H  # noqa: E402
from model import load_checkpoint  # noqa: E402
from preprocess import preprocess  # noqa: E402
from prompt import PromptBuilder  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_DIR = os.path.join(HERE, "testdata", "hybrid")
CHECKPOINTS = os.path.join(ROOT, "testdata", "checkpoints")
BLOCKS_MODEL = os.path.join(OUT_DIR, "tiny-shapes-blocks")
BUNDLED_MODEL = os.path.join(ROOT, "models", "tiny-shapes")
HELDOUT = os.path.join(ROOT, "tools", "tinymodel", "testdata")

RANDOM_MAX_NEW = 20  # the random checkpoints' budget; one case also at 5 (a block cut short)
SHAPES_MAX_NEW = 48  # tools/tinymodel's MAX_NEW_TOKENS

# ---------------------------------------------------------------------------------------
# Hand-made blocks (the tiny-shapes ids)
# ---------------------------------------------------------------------------------------

T = H.TokenIds(box_start=416, box_end=417, ref_start=418, ref_end=419, coord_start=421, coord_end=1421,
               none=359, null=1422, im_end=412, text_mask=420)
VOCAB = 1424
FILLER = [7, 8, 9, 10, 11, 12]  # byte tokens that take the rest of a row's probability
RED, CIRCLE, SQUARE = 300, 301, 302  # stand-ins for label words (any non-coordinate ids)


def c(v):
    return T.coord_start + v


def row(spec):
    """{id: p} -> [[id, p], ...] over the whole row: the rest of the mass goes to FILLER in
    halving steps, so every row's top 6 are distinct values. Probabilities are float32."""
    rest = 1.0 - sum(spec.values())
    weights = [2.0 ** -k for k in range(len(FILLER))]
    out = dict(spec)
    for i, w in zip(FILLER, weights):
        if i not in out:
            out[i] = rest * w / sum(weights)
    return sorted([i, H.f32(p)] for i, p in out.items() if p > 0)


def box(x1, y1, x2, y2, p=0.95):
    return [{T.box_start: 0.9}, {c(x1): p}, {c(y1): p}, {c(x2): p}, {c(y2): p}, {T.box_end: 0.9}]


def with_row(rows, r, spec):
    rows = list(rows)
    rows[r] = spec
    return rows


NULLS = {T.null: 0.9}
DECISION_CASES = [
    ("clean box", box(100, 200, 300, 400)),
    ("box reading ignores row 0", with_row(box(100, 200, 300, 400), 0, {T.ref_start: 0.9})),
    ("neighbouring coordinates are not abnormal", with_row(box(100, 200, 300, 400, 0.4), 1,
                                                          {c(100): 0.4, c(110): 0.3, c(90): 0.2})),
    ("abnormal spread rejects a coordinate", with_row(box(100, 200, 300, 400), 3, {c(300): 0.5, c(700): 0.4})),
    ("abnormal first coordinate", with_row(box(100, 200, 300, 400), 1, {c(100): 0.5, c(600): 0.4})),
    ("confident coordinate with a far second is kept", with_row(box(100, 200, 300, 400), 3,
                                                               {c(300): 0.92, c(700): 0.05})),
    ("first coordinate at exactly 0.9 is not abnormal", with_row(box(100, 200, 300, 400), 3,
                                                                 {c(300): 0.9, c(700): 0.05})),
    ("spread of exactly 60 is not abnormal", with_row(box(100, 200, 300, 400), 3, {c(300): 0.5, c(360): 0.4})),
    ("a row without a coordinate in its top 4", with_row(box(100, 200, 300, 400), 4,
                                                         {T.box_end: 0.5, 7: 0.2, 8: 0.15, 9: 0.1, c(400): 0.04})),
    ("end score below 0.2: an illegal frame", with_row(box(100, 200, 300, 400), 5, {T.box_end: 0.1, T.null: 0.05})),
    ("end score exactly 0.2 is legal", with_row(box(100, 200, 300, 400), 5, {T.box_end: 0.1, T.null: 0.1})),
    ("empty box", [{T.box_start: 0.8}, {T.none: 0.5}, {T.box_end: 0.5}, {T.null: 0.3}, {T.null: 0.3}, NULLS]),
    ("empty box below the <box> threshold goes by argmax", [{T.box_start: 0.65}, {T.none: 0.5}, {T.box_end: 0.5},
                                                            {T.null: 0.3}, {T.null: 0.3}, NULLS]),
    ("empty box test is strict: <null> exactly 0.1", [{T.box_start: 0.8}, {T.none: 0.5}, {T.box_end: 0.5},
                                                      {T.null: 0.1}, {T.null: 0.3}, NULLS]),
    ("label block", [{T.ref_start: 0.9}, {RED: 0.9}, {CIRCLE: 0.9}, {T.ref_end: 0.9}, NULLS, NULLS]),
    ("label block with coordinates in its rows' tails reads as a box",
     [{T.ref_start: 0.9}, {RED: 0.85, c(10): 0.06}, {CIRCLE: 0.85, c(500): 0.06}, {T.ref_end: 0.85, c(990): 0.06},
      {T.null: 0.85, c(40): 0.06}, NULLS]),
    ("label block below the <ref> threshold goes by argmax", [{T.ref_start: 0.55}, {RED: 0.9}, {CIRCLE: 0.9},
                                                              {T.ref_end: 0.9}, NULLS, NULLS]),
    ("label reading skips coordinates", [{T.ref_start: 0.9}, {c(5): 0.5, RED: 0.4}, {CIRCLE: 0.9},
                                        {T.ref_end: 0.9}, {T.null: 0.5}, {T.null: 0.1, 7: 0.5}]),
    ("label row whose top 5 are all coordinates", [{T.ref_start: 0.9}, {RED: 0.9}, {c(1): 0.3, c(2): 0.25, c(3): 0.2,
                                                                                    c(4): 0.15, c(5): 0.05},
                                                   {T.ref_end: 0.9}, {T.ref_end: 0.9}, {7: 0.9}]),
    ("long label fills the block", [{T.ref_start: 0.9}, {RED: 0.9}, {CIRCLE: 0.9}, {SQUARE: 0.9}, {RED: 0.9},
                                    {CIRCLE: 0.9}]),
    ("doubled </ref> keeps one", [{RED: 0.9}, {T.ref_end: 0.9}, {T.ref_end: 0.9}, NULLS, NULLS, {7: 0.9}]),
    ("end block", [{T.im_end: 0.9}, NULLS, NULLS, NULLS, NULLS, NULLS]),
    ("all <null> ends too", [NULLS] * 6),
    ("point", [{T.box_start: 0.9}, {c(310): 0.9}, {c(730): 0.9}, {T.box_end: 0.9}, NULLS, NULLS]),
    ("broken box: three coordinates then text", [{T.box_start: 0.9}, {c(1): 0.9}, {c(2): 0.9}, {c(3): 0.9},
                                                 {RED: 0.9}, {7: 0.9}]),
    ("<box> then text", [{T.box_start: 0.9}, {RED: 0.9}, {7: 0.9}, {8: 0.9}, {9: 0.9}, {10: 0.9}]),
]

AR_CASES = [T.box_end, c(0), c(1000), T.none, T.ref_start, T.im_end, T.null, 7]


def decision_cases():
    cases = []
    for name, specs in DECISION_CASES:
        rows = [row(s) for s in specs]
        probs = torch.zeros(len(rows), VOCAB)
        for r, entries in enumerate(rows):
            for i, p in entries:
                probs[r, i] = p
        out = {"name": name, "rows": rows}
        for mode in ("hybrid", "fast"):
            ch = H.read_block(probs, T, mode)
            pat = H.handle_pattern(ch.new_tokens, T, mode)
            out[mode] = {"x0": ch.x0, "frame": ch.box["frame"], "path": ch.path, "new_tokens": ch.new_tokens,
                         "type": pat.type, "tokens": pat.tokens, "to_ar": pat.to_ar, "terminal": pat.terminal}
        cases.append(out)
    return {
        "format_version": 1,
        "generator": "tools/refmodel/gen_hybrid_goldens.py (hybrid.py on hand-made probability rows)",
        "token_ids": token_ids_json(T),
        "vocab_size": VOCAB,
        "thresholds": thresholds_json(),
        "about_rows": "each block row as [id, probability] pairs; every other id has probability 0",
        "cases": cases,
        "ar_cases": [{"token": tok, "hybrid": H.classify_ar(tok, T, "hybrid"), "slow": H.classify_ar(tok, T, "slow")}
                     for tok in AR_CASES],
    }


def token_ids_json(t):
    return {k: getattr(t, k) for k in ("box_start", "box_end", "ref_start", "ref_end", "coord_start", "coord_end",
                                       "none", "null", "im_end", "text_mask", "block_size")}


def thresholds_json():
    return {"box_top_k": H.BOX_TOP_K, "ref_top_k": H.REF_TOP_K, "ref_start_min": H.REF_START_MIN,
            "box_start_min": H.BOX_START_MIN, "end_score_min": H.END_SCORE_MIN,
            "empty_none_min": H.EMPTY_NONE_MIN, "empty_box_end_min": H.EMPTY_BOX_END_MIN,
            "empty_null_min": H.EMPTY_NULL_MIN, "abnormal_prob": H.ABNORMAL_PROB,
            "abnormal_spread": H.ABNORMAL_SPREAD, "rejected_coordinate": H.REJECTED}


# ---------------------------------------------------------------------------------------
# Model runs
# ---------------------------------------------------------------------------------------


def summary(gen, slow_tokens, t):
    boxes, whole = gen.boxes(t)
    return {"forwards": gen.forwards, "block_steps": sum(s["kind"] == "block" for s in gen.steps),
            "ar_steps": sum(s["kind"] == "ar" for s in gen.steps), "boxes": boxes, "boxes_in_one_step": whole,
            "slow_forwards": len(slow_tokens), "same_as_slow": gen.tokens == slow_tokens}


def run_case(model, t, prompt, emb, max_new, mode):
    gen = H.generate(model, prompt, emb, max_new, mode=mode, t=t)
    slow = H.generate(model, prompt, emb, max_new, mode="slow", t=t)
    return {"mode": mode, "max_new": max_new, "tokens": gen.tokens, "slow_tokens": slow.tokens,
            "summary": summary(gen, slow.tokens, t), "steps": H.to_json(gen.steps)}


@torch.no_grad()
def checkpoint_goldens(name):
    """The random checkpoints: gen_goldens.py's cases, each in hybrid and fast mode, and the
    first one also at a budget of 5."""
    ckpt = os.path.join(CHECKPOINTS, name)
    model = load_checkpoint(ckpt)
    cfg, t = model.cfg, H.TokenIds.from_config(model.cfg)
    builder = PromptBuilder(os.path.join(ckpt, "added_tokens.json"), gen_goldens.ENCODINGS)
    runs = []
    for k, (case, photo, limit, query) in enumerate(gen_goldens.CASES[name]):
        img = Image.open(os.path.join(gen_goldens.IMAGES, photo))
        pp = cfg.preprocessor
        patches, gh, gw, _ = preprocess(img, limit, pp.image_mean, pp.image_std, cfg.vision.patch_size,
                                        cfg.vision.merge_kernel)
        prompt = builder.build(query, (gh // 2) * (gw // 2))
        emb = model.encode_image(patches, gh, gw)
        budgets = [("hybrid", RANDOM_MAX_NEW), ("fast", RANDOM_MAX_NEW)] + ([("hybrid", 5)] if k == 0 else [])
        for mode, max_new in budgets:
            run = {"case": case, "image": os.path.relpath(os.path.join(gen_goldens.IMAGES, photo), ROOT),
                   "in_token_limit": limit, "query": query, "prompt_ids": prompt}
            run.update(run_case(model, t, prompt, emb, max_new, mode))
            runs.append(run)
    return golden_file(name, t, runs, f"the {name} goldens' cases (gen_goldens.py; its <case>.prompt.i32 "
                                      f"and <case>.patches.f32 are these prompts and images)")


def golden_file(name, t, runs, about):
    return {
        "format_version": 1,
        "checkpoint": name,
        "generator": "tools/refmodel/gen_hybrid_goldens.py (hybrid.py, PyTorch float32)",
        "about": about,
        "token_ids": token_ids_json(t),
        "thresholds": thresholds_json(),
        "runs": runs,
    }


@torch.no_grad()
def shapes_goldens(ckpt=BLOCKS_MODEL, limit=None):
    """A tiny-shapes model on tools/tinymodel/testdata's held-out scenes, in hybrid mode."""
    model = load_checkpoint(ckpt)
    cfg, t = model.cfg, H.TokenIds.from_config(model.cfg)
    with open(os.path.join(HELDOUT, "heldout.json")) as f:
        scenes = json.load(f)["scenes"]
    runs = []
    for sc in scenes[:limit]:
        img = Image.open(os.path.join(HELDOUT, sc["file"]))
        pp = cfg.preprocessor
        patches, gh, gw, _ = preprocess(img, pp.in_token_limit, pp.image_mean, pp.image_std,
                                        cfg.vision.patch_size, cfg.vision.merge_kernel)
        emb = model.encode_image(patches, gh, gw)
        run = {"case": os.path.splitext(os.path.basename(sc["file"]))[0],
               "image": os.path.relpath(os.path.join(HELDOUT, sc["file"]), ROOT),
               "in_token_limit": pp.in_token_limit, "task": sc["task"], "query": sc["query"],
               "prompt_ids": sc["prompt_ids"]}
        run.update(run_case(model, t, sc["prompt_ids"], emb, SHAPES_MAX_NEW, "hybrid"))
        runs.append(run)
    name = os.path.basename(os.path.normpath(ckpt))
    return golden_file(name, t, runs, f"{os.path.relpath(ckpt, ROOT)} on tools/tinymodel/testdata/heldout.json's "
                                      f"scenes (prompt ids from there)")


def totals(golden):
    """Acceptance figures over a golden file's hybrid runs."""
    hy = [r for r in golden["runs"] if r["mode"] == "hybrid"]
    s = [r["summary"] for r in hy]
    boxes, whole = sum(x["boxes"] for x in s), sum(x["boxes_in_one_step"] for x in s)
    return {"runs": len(hy), "boxes": boxes, "boxes_in_one_step": whole,
            "forwards": sum(x["forwards"] for x in s), "slow_forwards": sum(x["slow_forwards"] for x in s),
            "same_as_slow": sum(x["same_as_slow"] for x in s)}


def write(obj, name):
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only-shapes", action="store_true", help="only the two shape models' goldens")
    ap.add_argument("--only-bundled", action="store_true", help="only the bundled model's goldens (tiny-shapes.json)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not (args.only_shapes or args.only_bundled):
        write(decision_cases(), "decisions.json")
        for name in ("tiny-bf16", "tiny-f32"):
            g = checkpoint_goldens(name)
            write(g, f"{name}.json")
            print(f"  {name}: {totals(g)}")
    models = [(BUNDLED_MODEL, "tiny-shapes")] if args.only_bundled else [(BLOCKS_MODEL, "tiny-shapes-blocks"),
                                                                          (BUNDLED_MODEL, "tiny-shapes")]
    for ckpt, name in models:
        g = shapes_goldens(ckpt)
        write(g, f"{name}.json")
        print(f"  {name}: {totals(g)}")


if __name__ == "__main__":
    main()
