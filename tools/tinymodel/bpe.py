"""A small byte-level BPE tokenizer in the Qwen2 file formats, trained on our own corpus.

The rules are the ones engine/tokenizer applies to a checkpoint directory:
  1. added tokens (added_tokens.json) are matched whole, longest first, before anything else;
  2. the text between them is put in NFC and split by Qwen2's pre-tokenizer regex;
  3. each word's UTF-8 bytes become byte-level characters (GPT-2's bytes_to_unicode table)
     and are merged pair by pair, always the pair with the lowest merge rank first.

    tok = Tokenizer.load("models/tiny-shapes")
    ids = tok.encode("<|im_start|>user\\nPoint to: red circle.<|im_end|>")

Files written (the real formats): vocab.json (byte-level token -> id), merges.txt
("#version: 0.2" then "left right" per line by rank), added_tokens.json (token -> id).
"""

import collections
import json
import os
import unicodedata

import regex

# Qwen2's split pattern (docs/background.md, "Tokens"; docs/tokenizer.md).
PRETOKENIZE = regex.compile(
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

VOCAB_FILE, MERGES_FILE, ADDED_FILE = "vocab.json", "merges.txt", "added_tokens.json"


def bytes_to_unicode():
    """GPT-2's table: every byte gets a printable character; printable Latin-1 bytes map to
    themselves, the others to U+0100 and up, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHARS = bytes_to_unicode()


def words(text):
    """Pre-tokenized words of text (which holds no added token), as byte-level strings."""
    text = unicodedata.normalize("NFC", text)
    return ["".join(BYTE_CHARS[b] for b in w.encode("utf-8")) for w in PRETOKENIZE.findall(text)]


def train_merges(texts, num_merges, must_be_tokens=()):
    """Learns up to num_merges merges from texts (strings without added tokens): each step
    merges the most frequent adjacent pair (ties: the pair first seen). Stops early when no
    pair occurs twice. must_be_tokens are words that must come out as one token (checked
    after training)."""
    counts = collections.Counter()
    for t in texts:
        counts.update(words(t))
    vocab_words = {w: [c for c in w] for w in counts}
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for w, n in counts.items():
            syms = vocab_words[w]
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), n = max(pairs.items(), key=lambda kv: kv[1])  # Counter keeps insertion order on ties
        if n < 2:
            break
        merges.append((a, b))
        for w, syms in vocab_words.items():
            i, out = 0, []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            vocab_words[w] = out
    tok = Tokenizer(merges, {})
    for word in must_be_tokens:
        if len(tok.bpe(words(word)[0])) != 1:
            raise ValueError(f"{word!r} did not become one token in {len(merges)} merges; train on more of it")
    return merges


class Tokenizer:
    def __init__(self, merges, added):
        """merges: [(left, right)] by rank; added: {token: id}. Byte tokens get ids 0..255 in
        byte order, merged tokens 256.. in rank order."""
        self.merges = list(merges)
        self.vocab = {BYTE_CHARS[b]: b for b in range(256)}
        for a, b in self.merges:
            self.vocab.setdefault(a + b, len(self.vocab))
        self.ranks = {pair: r for r, pair in enumerate(self.merges)}
        self.added = dict(added)
        # Leftmost match first; at one position the alternation tries longer tokens first.
        by_length = sorted(self.added, key=len, reverse=True)
        self.added_pattern = regex.compile("|".join(regex.escape(t) for t in by_length)) if by_length else None
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: t for t, i in self.added.items()})
        self.byte_of = {c: b for b, c in BYTE_CHARS.items()}

    def bpe(self, word):
        """Ids of one byte-level word: repeatedly merge the lowest-ranked adjacent pair."""
        syms = list(word)
        while len(syms) > 1:
            best, best_rank = None, None
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            syms[best:best + 2] = [syms[best] + syms[best + 1]]
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        ids, pos = [], 0
        while pos < len(text):
            start, token = self._next_added(text, pos)
            plain = text[pos:start]
            for w in words(plain) if plain else ():
                ids += self.bpe(w)
            if token is None:
                break
            ids.append(self.added[token])
            pos = start + len(token)
        return ids

    def _next_added(self, text, pos):
        """(index, token) of the first added token at or after pos, longest first at a
        position; (len(text), None) when there is none."""
        m = self.added_pattern.search(text, pos) if self.added_pattern else None
        return (m.start(), m.group()) if m else (len(text), None)

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.id_to_token[i]
            if t in self.added:
                out += t.encode("utf-8")
            else:
                out += bytes(self.byte_of[c] for c in t)
        return out.decode("utf-8", errors="replace")

    def id(self, token):
        return self.added[token] if token in self.added else self.vocab[token]

    @property
    def vocab_size(self):
        return max(self.id_to_token) + 1

    def save(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, VOCAB_FILE), "w", encoding="utf-8") as f:
            json.dump(self.vocab, f, ensure_ascii=False, indent=0)
            f.write("\n")
        with open(os.path.join(out_dir, MERGES_FILE), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
            for a, b in self.merges:
                f.write(f"{a} {b}\n")
        with open(os.path.join(out_dir, ADDED_FILE), "w", encoding="utf-8") as f:
            json.dump(self.added, f, ensure_ascii=False, indent=0)
            f.write("\n")

    @classmethod
    def load(cls, ckpt_dir):
        with open(os.path.join(ckpt_dir, MERGES_FILE), encoding="utf-8") as f:
            lines = [ln.rstrip("\n") for ln in f]
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        merges = [tuple(ln.split(" ")) for ln in lines if ln]
        with open(os.path.join(ckpt_dir, ADDED_FILE), encoding="utf-8") as f:
            added = json.load(f)
        tok = cls(merges, added)
        with open(os.path.join(ckpt_dir, VOCAB_FILE), encoding="utf-8") as f:
            if json.load(f) != tok.vocab:
                raise ValueError(f"{ckpt_dir}: vocab.json does not match merges.txt")
        return tok
