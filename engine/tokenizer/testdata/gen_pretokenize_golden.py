#!/usr/bin/python3
"""Writes pretokenize-golden.jsonl: random strings built from characters that stress
Qwen2's pre-tokenizer split pattern, and how the `regex` module (which has lookahead)
splits them. The Go scanner in ../pretokenize.go must split them the same way.

Run from this directory with Debian's python3-regex: ./gen_pretokenize_golden.py
"""
import json
import random

import regex

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Characters assigned long before Unicode 15, so that Go's tables and regex's agree.
PIECES = [
    "a", "Z", "é", "ß", "ſ", "ǅ", "中", "文", "ね", "한", "ب", "ש", "न", "्", "ि", "\u0301",
    "0", "7", "٣", "²", "①", "Ⅻ", "½",
    " ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2009", "\u3000", "\u2028", "\u0085",
    "\u000b", "\u000c", "\u200b", "\u001c", "\u180e", "\ufeff",
    "'", "'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'D", "'ſ", "'x",
    ".", ",", "!", "?", "-", "_", "#", "/", "(", ")", "\"", "<", ">", "|", "$", "…", "、",
    "🚗", "👍🏽", "\u200d",
    "word", " the", "1000", "...", "  ", "\n\n", " \n ",
]


def main():
    rng = random.Random(20261202)
    seen = set()
    with open("pretokenize-golden.jsonl", "w", encoding="utf-8") as out:
        while len(seen) < 1500:
            text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
            if text in seen:
                continue
            seen.add(text)
            words = regex.findall(PATTERN, text)
            assert "".join(words) == text, text
            out.write(json.dumps({"text": text, "words": words}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
