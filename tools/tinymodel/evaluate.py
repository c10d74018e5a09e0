#!/usr/bin/python3
"""Measures a tiny-shapes checkpoint on held-out scenes (seeds the training stream never
uses), greedy decoding through tools/refmodel exactly as the checkpoint ships (bf16 weights
read back as float32).

    evaluate.py --checkpoint models/tiny-shapes [--n-detect 150] [--json out.json] [--mode hybrid]
    evaluate.py --checkpoint A --checkpoint B --mode slow,hybrid   # side by side, one table

With several checkpoints or modes every one runs on the same queries and a comparison
table follows (the single-category figures and, for parallel modes, the decoding figures).

Figures, per task family:
  found      ground-truth objects matched by a predicted box at IoU >= 0.5 (one-to-one)
  mean IoU   over ground-truth objects, the IoU of the box matched to it (0 when none)
  false pos  predicted boxes matched to no ground-truth object at IoU >= 0.5
  None acc   of the queries whose thing is absent, the share answered with no box at all
Points count as found when the point lies inside a matched object's box.
"""

import argparse
import json
import os
import random
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import scenes  # noqa: E402
import tinyla  # noqa: E402
from tinyla import hybrid, refmodel  # noqa: E402

BOX = re.compile(r"<box>((?:<\d+>)+)</box>")
COORD = re.compile(r"<(\d+)>")


def parse(text):
    """(boxes, points) in 0..1000 units from generated text: 4-value boxes, 2-value points."""
    text = text.split("<|im_end|>")[0]
    boxes, points = [], []
    for m in BOX.finditer(text):
        v = [int(x) for x in COORD.findall(m.group(1))]
        if len(v) == 4:
            boxes.append((min(v[0], v[2]), min(v[1], v[3]), max(v[0], v[2]), max(v[1], v[3])))
        elif len(v) == 2:
            points.append(tuple(v))
    return boxes, points


def iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def norm_box(obj, w, h):
    x1, y1, x2, y2 = obj.box
    return (x1 / w * 1000, y1 / h * 1000, x2 / w * 1000, y2 / h * 1000)


def match(truth, pred, threshold=0.5):
    """Greedy one-to-one matching by IoU, best pairs first. Returns (IoU per truth box,
    number of predicted boxes left unmatched at the threshold)."""
    pairs = sorted(((iou(t, p), i, j) for i, t in enumerate(truth) for j, p in enumerate(pred)), reverse=True)
    best, used_t, used_p = [0.0] * len(truth), set(), set()
    for v, i, j in pairs:
        if v < threshold or i in used_t or j in used_p:
            continue
        best[i] = v
        used_t.add(i)
        used_p.add(j)
    # A truth box with no match at the threshold still reports its best overlap for mean IoU.
    for i, t in enumerate(truth):
        if i not in used_t:
            best[i] = max((iou(t, p) for j, p in enumerate(pred) if j not in used_p), default=0.0)
    return best, len(pred) - len(used_p)


class Tally:
    def __init__(self):
        self.objects = self.found = self.false_pos = self.absent = self.none_ok = self.queries = 0
        self.iou_sum = 0.0

    def add_boxes(self, truth, pred):
        self.queries += 1
        if not truth:
            self.absent += 1
            self.none_ok += not pred
        ious, fp = match(truth, pred)
        self.objects += len(truth)
        self.found += sum(v >= 0.5 for v in ious)
        self.iou_sum += sum(ious)
        self.false_pos += fp

    def add_points(self, truth_boxes, points):
        self.queries += 1
        if not truth_boxes:
            self.absent += 1
            self.none_ok += not points
        used = set()
        for t in truth_boxes:
            hit = next((j for j, p in enumerate(points) if j not in used
                        and t[0] <= p[0] <= t[2] and t[1] <= p[1] <= t[3]), None)
            if hit is not None:
                used.add(hit)
        self.objects += len(truth_boxes)
        self.found += len(used)
        self.false_pos += len(points) - len(used)

    def summary(self):
        return {
            "queries": self.queries, "objects": self.objects,
            "found_iou50": round(self.found / self.objects, 4) if self.objects else None,
            "mean_iou": round(self.iou_sum / self.objects, 4) if self.objects else None,
            "false_positives": self.false_pos,
            "false_positives_per_query": round(self.false_pos / self.queries, 4) if self.queries else None,
            "absent_queries": self.absent,
            "none_accuracy": round(self.none_ok / self.absent, 4) if self.absent else None,
        }


def heldout(kind, i):
    """Held-out sample i of a kind: its own string-seeded generator, disjoint from training's
    integer-seeded ones."""
    rng = random.Random(f"heldout/{kind}/{i}")
    scene = scenes.make_scene(rng)
    if kind == "detect1":
        cat = scenes.random_category(rng, scene)
        return scene, "detect", cat, scenes.detect_answer(scene, [cat])
    if kind == "detect2":
        while True:
            task, query, answer = scenes.make_query(rng, scene, "detect")
            if "</c>" in query:
                return scene, task, query, answer
    task = {"ground": "ground", "ground_one": "ground_one", "point": "point"}[kind]
    return (scene,) + scenes.make_query(rng, scene, task)


def truth_for(scene, task, query):
    """Ground-truth boxes (0..1000 units) the query asks for."""
    w, h = scene.size
    if task == "ground_one":
        word, _, cat = query[len("the "):].partition(" ")
        target = scenes.superlative_target(scene, word, cat)
        return [] if target is None else [norm_box(target, w, h)]
    cats = [scenes.phrase_category(query)] if task == "ground" else query.split("</c>")
    return [norm_box(o, w, h) for o in scene.objects if any(scenes.matches(o, c) for c in cats)]


def run_one(model, tok, scene, task, query, none_bias=0.0, mode="slow", steps=None):
    """Greedy decoding of one query: mode "slow" one token a step (tinyla.greedy), "hybrid"
    or "fast" parallel box decoding (tools/refmodel/hybrid.py; its step records are
    appended to the list steps when given)."""
    patches, gh, gw = tinyla.prepare_image(scene.image)
    prompt = tinyla.prompt_ids(tok, task, query, gh * gw // 4)
    if mode != "slow":
        gen = hybrid.generate(model, prompt, model.encode_image(patches, gh, gw), tinyla.MAX_NEW_TOKENS, mode)
        if steps is not None:
            steps.append(gen.steps)
        return prompt, gen.tokens, tok.decode(gen.tokens)
    bias = {tok.id("None"): none_bias} if none_bias else None
    ids = tinyla.greedy(model, patches, gh, gw, prompt, model.cfg.text.eos_token_id, logit_bias=bias)
    return prompt, ids, tok.decode(ids)


class Speed:
    """How parallel box decoding did: forwards against tokens, and the boxes (<box>..</box>,
    None and points included) a single block step wrote whole."""

    def __init__(self):
        self.queries = self.forwards = self.tokens = self.boxes = self.whole = self.ar_steps = 0

    def add(self, steps, tokens, box_start):
        self.queries += 1
        self.forwards += len(steps)
        self.tokens += len(tokens)
        self.boxes += tokens.count(box_start)
        self.whole += sum(s["type"] in ("coord_box", "point_box", "empty_box") for s in steps)
        self.ar_steps += sum(s["kind"] == "ar" for s in steps)

    def summary(self):
        return {"forwards": self.forwards, "tokens": self.tokens, "ar_steps": self.ar_steps,
                "forwards_per_query": round(self.forwards / max(1, self.queries), 3),
                "tokens_per_query": round(self.tokens / max(1, self.queries), 3),
                "boxes": self.boxes, "boxes_in_one_step": self.whole,
                "one_step_share": round(self.whole / self.boxes, 4) if self.boxes else None}


def evaluate(ckpt, counts, log=print, none_bias=0.0, mode="slow"):
    tok = bpe.Tokenizer.load(ckpt)
    model = refmodel.load_checkpoint(ckpt)
    results, t0 = {}, time.time()
    speed_all = Speed()
    for kind, n in counts.items():
        tally, speed = Tally(), Speed()
        for i in range(n):
            scene, task, query, _ = heldout(kind, i)
            steps = []
            _, ids, text = run_one(model, tok, scene, task, query, none_bias, mode, steps)
            if mode != "slow":
                for sp in (speed, speed_all):
                    sp.add(steps[0], ids, model.cfg.box_start_token_id)
            boxes, points = parse(text)
            truth = truth_for(scene, task, query)
            if task == "point":
                tally.add_points(truth, points)
            else:
                tally.add_boxes(truth, boxes)
        results[kind] = tally.summary()
        if mode != "slow":
            results[kind]["decoding"] = speed.summary()
        log(f"{kind}: {json.dumps(results[kind])} ({time.time() - t0:.0f}s)")
    if mode != "slow":
        results["decoding"] = speed_all.summary()
        log(f"decoding ({mode}): {json.dumps(results['decoding'])}")
    return results


def comparison(all_results):
    """Lines of a table: per (checkpoint, mode), single-category found, false positives per
    query (single-category and over every query), None accuracy, and for parallel modes the
    boxes written in one step and forwards per query."""
    head = ("checkpoint", "mode", "detect1 found", "detect1 fp/q", "all fp/q", "detect1 None acc",
            "boxes in one step", "forwards/q")
    lines = [" | ".join(head)]
    for (ckpt, mode), res in all_results.items():
        d1 = res["detect1"]
        kinds = [k for k in res if k != "decoding"]
        fp = sum(res[k]["false_positives"] for k in kinds) / max(1, sum(res[k]["queries"] for k in kinds))
        dec = res.get("decoding")
        one = f"{dec['boxes_in_one_step']}/{dec['boxes']}" if dec else "-"
        fwd = f"{dec['forwards_per_query']:.2f}" if dec else "-"
        found = f"{d1['found_iou50'] * 100:.1f} % ({round(d1['found_iou50'] * d1['objects'])}/{d1['objects']})"
        lines.append(" | ".join((ckpt, mode, found, f"{d1['false_positives_per_query']:.3f}", f"{fp:.3f}",
                                 f"{d1['none_accuracy']}", one, fwd)))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, action="append", help="repeat to compare several")
    ap.add_argument("--n-detect", type=int, default=150, help="single-category detection queries")
    ap.add_argument("--n-other", type=int, default=50, help="queries of each other kind")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="", help="also write the figures here")
    ap.add_argument("--mode", default="slow",
                    help="slow: one token a step (what the engine does); hybrid, fast: parallel box decoding "
                         "(docs/hybrid-decoding.md), also reporting forwards and boxes written in one step; "
                         "several joined by commas (slow,hybrid) run one after the other")
    ap.add_argument("--none-bias", type=float, default=0.0,
                    help="add this to the None logit while decoding: shows how the figures would move if "
                         "training made None more or less likely (a calibration study; the engine has no "
                         "such knob)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    counts = {"detect1": args.n_detect, "detect2": args.n_other, "ground": args.n_other, "ground_one": args.n_other,
              "point": args.n_other}
    modes = args.mode.split(",")
    for m in modes:
        if m not in ("slow", "hybrid", "fast"):
            ap.error(f"--mode: {m!r} is not slow, hybrid or fast")
    runs = {}
    for ckpt in args.checkpoint:
        for m in modes:
            print(f"== {ckpt}, {m}", flush=True)
            runs[(ckpt, m)] = evaluate(ckpt, counts, none_bias=args.none_bias, mode=m)
    if len(runs) == 1:
        results = next(iter(runs.values()))
    else:
        results = {f"{c} {m}": r for (c, m), r in runs.items()}
        print("\n".join(comparison(runs)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
