#!/usr/bin/python3
"""Writes the goldens the Go tests in this folder check the engine against:

  testdata/tokenizer_golden.jsonl  texts and the ids this folder's Python BPE gives them
                                   (prompts of every task, answers, odd strings)
  testdata/heldout/NN.png          held-out scenes (never seen in training)
  testdata/heldout.json            per scene: task, query, the true boxes (0..1000 units),
                                   the prompt ids, and the PyTorch greedy ids and margins of
                                   the shipped checkpoint

    export_goldens.py --checkpoint models/tiny-shapes --out tools/tinymodel/testdata
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import evaluate  # noqa: E402
import scenes  # noqa: E402
import tinyla  # noqa: E402
from tinyla import refmodel  # noqa: E402

# Held-out scenes for the Go end-to-end test: mostly single-category detection, the
# figure the test asserts, and a few of each other kind to show them working.
SCENE_KINDS = [("detect1", 80), ("detect2", 4), ("ground", 4), ("ground_one", 4), ("point", 4)]

ODD_TEXTS = [
    "None", "none", " None", "<box>None</box>", "red circle</c>square", "the largest blue shape",
    "<ref>red circle</ref><box><12><340><1000><0></box><|im_end|>", "Point to: yellow star.",
    "  two  spaces ", "tabs\tand\nnewlines\r\n", "digits 12345 and 3.14", "Ünïcödé café 日本", "Cafe\u0301 (decomposed)",
    "<IMG_CONTEXT><IMG_CONTEXT></img>", "<1000><100><10><1>", "<10", "it's we'll they'd", "",
]


def tokenizer_texts():
    texts = list(ODD_TEXTS)
    for task, query in (("detect", "red circle"), ("detect", "square</c>purple shape"),
                        ("ground_one", "the smallest green triangle"), ("point", "blue star"),
                        ("ground", "yellow shape")):
        for n in (1, 16):
            texts.append(scenes.chat_prompt(scenes.instruction(task, query), n))
    return texts


@torch.no_grad()
def greedy_with_margins(model, patches, gh, gw, prompt, eos, max_new):
    emb = model.encode_image(patches, gh, gw)
    seq, out, margins = list(prompt), [], []
    for _ in range(max_new):
        logits = model(torch.tensor(seq)[None], emb)[0, -1]
        top = torch.topk(logits, 2)
        nxt = int(top.indices[0])
        out.append(nxt)
        margins.append(round(float(top.values[0] - top.values[1]), 4))
        seq.append(nxt)
        if nxt == eos:
            break
    return out, margins


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = bpe.Tokenizer.load(args.checkpoint)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer_golden.jsonl"), "w", encoding="utf-8") as f:
        for text in tokenizer_texts():
            f.write(json.dumps({"text": text, "ids": tok.encode(text)}, ensure_ascii=False) + "\n")
    if args.tokenizer_only:
        return

    model = refmodel.load_checkpoint(args.checkpoint)
    eos = model.cfg.text.eos_token_id
    img_dir = os.path.join(args.out, "heldout")
    os.makedirs(img_dir, exist_ok=True)
    rows, k = [], 0
    for kind, n in SCENE_KINDS:
        for i in range(n):
            # Indices past the ones evaluate.py reports on, so the figures stay independent.
            scene, task, query, answer = evaluate.heldout(kind, 100_000 + i)
            name = f"{k:02d}.png"
            scene.image.save(os.path.join(img_dir, name), optimize=True)
            patches, gh, gw = tinyla.prepare_image(scene.image)
            prompt = tinyla.prompt_ids(tok, task, query, gh * gw // 4)
            ids, margins = greedy_with_margins(model, patches, gh, gw, prompt, eos, tinyla.MAX_NEW_TOKENS)
            rows.append({
                "file": f"heldout/{name}", "kind": kind, "task": task, "query": query,
                "width": scene.size[0], "height": scene.size[1],
                "truth": [[round(v, 2) for v in b] for b in evaluate.truth_for(scene, task, query)],
                "answer": answer, "prompt_ids": prompt, "torch_ids": ids, "torch_margins": margins,
                "torch_text": tok.decode(ids),
            })
            k += 1
    with open(os.path.join(args.out, "heldout.json"), "w") as f:
        json.dump({"checkpoint": os.path.basename(os.path.normpath(args.checkpoint)),
                   "max_new_tokens": tinyla.MAX_NEW_TOKENS, "scenes": rows}, f, indent=1)
        f.write("\n")
    print(f"{len(rows)} held-out scenes written to {args.out}")


if __name__ == "__main__":
    main()
