#!/usr/bin/python3
"""Trains the tiny model's byte-level BPE on the prompt/answer corpus of the synthetic world
and writes vocab.json, merges.txt and added_tokens.json into the checkpoint directory.

    build_tokenizer.py --out models/tiny-shapes [--merges 320] [--seed 1]

Id layout: 0..255 the byte tokens, then the merges in rank order, then the added tokens in
ADDED_TOKENS order (so the 1001 coordinate tokens are contiguous, as config.json's
coord_start_token_id..coord_end_token_id require).
"""

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import scenes  # noqa: E402

ADDED_TOKENS = (
    ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<IMG_CONTEXT>", "<img>", "</img>", "<box>", "</box>",
     "<ref>", "</ref>", "<text_mask>"]
    + [f"<{i}>" for i in range(1001)]
    + ["<null>", "<switch>"]
)


def corpus(rng, n):
    """The text pieces the model reads and writes, with the added tokens cut out (BPE never
    sees them: the tokenizer matches them first)."""
    texts = []
    for _ in range(n):
        scene = scenes.make_scene(rng, size=(112, 112))
        task, query, answer = scenes.make_query(rng, scene)
        chat = scenes.chat_prompt(scenes.instruction(task, query), 1) + answer + "<|im_end|>"
        texts += split_added(chat)
    return texts


def split_added(text):
    tok = bpe.Tokenizer([], {t: i for i, t in enumerate(ADDED_TOKENS)})
    pieces, pos = [], 0
    while pos < len(text):
        start, token = tok._next_added(text, pos)
        if start > pos:
            pieces.append(text[pos:start])
        if token is None:
            break
        pos = start + len(token)
    return pieces


def build(num_merges, seed, n_samples=4000):
    merges = bpe.train_merges(corpus(random.Random(seed), n_samples), num_merges, must_be_tokens=("None",))
    first_added = 256 + len(merges)
    probe = bpe.Tokenizer(merges, {})
    first_added = len(probe.vocab)
    return bpe.Tokenizer(merges, {t: first_added + i for i, t in enumerate(ADDED_TOKENS)})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--merges", type=int, default=320)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tok = build(args.merges, args.seed)
    tok.save(args.out)
    print(f"{args.out}: {len(tok.vocab)} byte-level tokens ({len(tok.merges)} merges), "
          f"{len(tok.added)} added tokens, vocab size {tok.vocab_size}; None = {tok.id('None')}")


if __name__ == "__main__":
    main()
