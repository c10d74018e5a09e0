"""Parallel box decoding: LocateAnything's own "hybrid" generation (and "fast" and "slow"),
greedy, on top of the float32 reference model (model.py). This file is the specification the
engine ports; docs/hybrid-decoding.md explains it in prose, with the same section names.

Upstream is Hugging Face transformers, src/transformers/models/locateanything/ (read at commit
1166ea3f23440e7a472a7a0c9585aedf4b356237). Each part below names the upstream function it
follows; the code is written here from that reading, not copied.

    model = load_checkpoint(ckpt)
    gen = generate(model, prompt_ids, image_embeds, max_new=48, mode="hybrid")
    gen.tokens            # the generated ids
    gen.steps             # one record per model forward: what went in, what was decided

The loop, in one paragraph (upstream LocateAnythingForConditionalGeneration.generate): the
committed sequence starts as the prompt. Every step runs one forward over the committed
tokens the KV cache does not hold yet ("pending") and, in block mode, a block of six
[last committed token, <text_mask> x 5]. In block mode the six block rows' logits decide how
many tokens to commit at once (a whole box, a label, or the end); in one-token ("AR") mode the
last row's argmax is committed. After the forward the cache keeps the pending tokens' keys and
values and drops the block's, so the tokens committed by this step are pending in the next.
Hybrid mode starts in block mode, drops to AR when a block looks like a box but is not a clean
one, and returns to block mode when AR writes </box>.
"""

import dataclasses
import json
import math
import os

import numpy as np
import torch

from model import rope_1d_cos_sin, rotate_half

MODES = ("hybrid", "fast", "slow")

# ---------------------------------------------------------------------------------------
# Thresholds: upstream's values as they are actually used (generate_utils.py)
# ---------------------------------------------------------------------------------------


def f32(x):
    """x rounded to float32, as a Python float. Upstream compares float32 probabilities with
    Python constants, which torch rounds to float32 first: 0.9 means float32(0.9) =
    0.89999998. Every comparison below is between two such values."""
    return float(np.float32(x))


# sample_tokens calls decode_bbox_avg(keep_k=generate_kwargs.get("keep_k_avg", 4)); the
# keep_k=5 that _sample_token_in_mtp passes lands in generate_kwargs under another name and
# is never read. So a box's coordinates are looked for among each row's top 4.
BOX_TOP_K = 4
# decode_ref is called with its defaults: top 5, <ref> probability at least 0.6.
REF_TOP_K = 5
REF_START_MIN = f32(0.6)
# decode_bbox_avg's defaults, passed on to is_valid_box_frame (whose own defaults, 0.6 and
# topk, are therefore never used).
BOX_START_MIN = f32(0.7)
END_SCORE_MIN = f32(0.2)
# is_valid_box_frame's empty-box test: row 1 None > 0.2, row 2 </box> > 0.2, rows 3 and 4
# <null> > 0.1 (strict comparisons, unlike the >= of the two thresholds above).
EMPTY_NONE_MIN = f32(0.2)
EMPTY_BOX_END_MIN = f32(0.2)
EMPTY_NULL_MIN = f32(0.1)
# decode_bbox_avg, hybrid mode: a coordinate is "abnormal" (the row is torn between distant
# places) when its best coordinate has p < 0.9, more than one coordinate is in the row's top
# 4, and those coordinates span more than 60 ids (= 60 thousandths of the image side).
ABNORMAL_PROB = f32(0.9)
ABNORMAL_SPREAD = 60
# decode_bbox_avg writes id 0 in place of an abnormal coordinate; handle_pattern then sees a
# non-coordinate there and cuts the box before it. 0 is never a coordinate id.
REJECTED = 0


@dataclasses.dataclass(frozen=True)
class TokenIds:
    """The ids the block logic reads (upstream get_token_ids_from_config)."""

    box_start: int
    box_end: int
    ref_start: int
    ref_end: int
    coord_start: int
    coord_end: int
    none: int
    null: int
    im_end: int
    text_mask: int
    block_size: int = 6

    @classmethod
    def from_config(cls, cfg):
        return cls(box_start=cfg.box_start_token_id, box_end=cfg.box_end_token_id,
                   ref_start=cfg.ref_start_token_id, ref_end=cfg.ref_end_token_id,
                   coord_start=cfg.coord_start_token_id, coord_end=cfg.coord_end_token_id,
                   none=cfg.none_token_id, null=cfg.null_token_id, im_end=cfg.text.eos_token_id,
                   text_mask=cfg.text_mask_token_id, block_size=cfg.block_size)

    def is_coord(self, t):
        return self.coord_start <= t <= self.coord_end


# ---------------------------------------------------------------------------------------
# Ranking with a fixed tie rule
# ---------------------------------------------------------------------------------------


def ranked(row, k):
    """The k largest values of a 1-D tensor and their ids, largest first; equal values in
    id order (lower id first). Upstream uses torch.topk / max, whose order among exact ties
    is unspecified; this rule is the one the engine must follow."""
    vals, ids = torch.sort(row, descending=True, stable=True)
    return vals[:k], ids[:k]


def argmax(row):
    return int(ranked(row, 1)[1][0])


# ---------------------------------------------------------------------------------------
# Reading a block (generate_utils.py)
# ---------------------------------------------------------------------------------------


def is_valid_box_frame(probs, t):
    """Upstream is_valid_box_frame: "empty_box", "legal_box" or "illegal_box" from the six
    rows' probabilities [6, vocab]. Returns (kind, the values it compared)."""
    v = {
        "p_box_start": float(probs[0, t.box_start]),
        "p_none_1": float(probs[1, t.none]),
        "p_box_end_2": float(probs[2, t.box_end]),
        "p_null_3": float(probs[3, t.null]),
        "p_null_4": float(probs[4, t.null]),
        # Summed in this order, in float32, as upstream's probs[5, [box_end, null, im_end]].sum().
        "end_score": float(probs[5, t.box_end] + probs[5, t.null] + probs[5, t.im_end]),
    }
    if (v["p_box_start"] >= BOX_START_MIN and v["p_none_1"] > EMPTY_NONE_MIN and v["p_box_end_2"] > EMPTY_BOX_END_MIN
            and v["p_null_3"] > EMPTY_NULL_MIN and v["p_null_4"] > EMPTY_NULL_MIN):
        return "empty_box", v
    # Note: nothing here asks that row 0 be <box>. A label block whose last row is <null>
    # passes as "legal_box" and is only turned away below when its rows 1-4 hold no
    # coordinate in their top 4.
    if v["end_score"] >= END_SCORE_MIN:
        return "legal_box", v
    return "illegal_box", v


def decode_bbox_avg(probs, t, mode="hybrid"):
    """Upstream decode_bbox_avg: a whole box [<box>, c1, c2, c3, c4, </box>] from rows 1-4, or
    None. Returns (tokens or None, detail)."""
    frame, values = is_valid_box_frame(probs, t)
    detail = {"frame": frame, **values, "rows": []}
    if frame == "empty_box":
        return [t.box_start, t.none, t.box_end, t.null, t.null, t.null], detail
    if frame == "illegal_box":
        return None, detail
    coords = []
    for r in range(1, 5):
        p, ids = ranked(probs[r], BOX_TOP_K + 1)  # one extra to report the ranking gap
        top_p, top_ids = [float(x) for x in p[:BOX_TOP_K]], [int(x) for x in ids[:BOX_TOP_K]]
        valid = [i for i in top_ids if t.is_coord(i)]
        row = {"top_ids": top_ids, "top_p": top_p, "next_p": float(p[BOX_TOP_K]), "valid": len(valid)}
        detail["rows"].append(row)
        if not valid:
            coords = None  # keep reporting the other rows, like upstream computes all four at once
            continue
        first = next(k for k, i in enumerate(top_ids) if t.is_coord(i))
        row.update(first_id=top_ids[first], first_p=top_p[first], spread=max(valid) - min(valid))
        abnormal = (mode == "hybrid" and row["first_p"] < ABNORMAL_PROB and len(valid) > 1
                    and row["spread"] > ABNORMAL_SPREAD)
        row["abnormal"] = abnormal
        if coords is not None:
            coords.append(REJECTED if abnormal else row["first_id"])
    if coords is None:
        return None, detail  # some row has no coordinate in its top 4: "not a box"
    return [t.box_start] + coords + [t.box_end], detail


def decode_ref(probs, t):
    """Upstream decode_ref: a label block [<ref>, w1..w5] when row 0 is <ref> with p >= 0.6,
    each later row's most probable non-coordinate among its top 5; else None."""
    detail = {"p_ref_start": float(probs[0, t.ref_start]), "rows": []}
    if detail["p_ref_start"] < REF_START_MIN:
        return None, detail
    words = []
    for r in range(1, probs.shape[0]):
        p, ids = ranked(probs[r], REF_TOP_K + 1)
        top_ids = [int(x) for x in ids[:REF_TOP_K]]
        pick = next((i for i in top_ids if not t.is_coord(i)), None)
        detail["rows"].append({"top_ids": top_ids, "top_p": [float(x) for x in p[:REF_TOP_K]],
                               "next_p": float(p[REF_TOP_K]), "pick": pick})
        if pick is None:
            return None, detail
        words.append(pick)
    return [t.ref_start] + words, detail


@dataclasses.dataclass
class BlockChoice:
    x0: list          # the six rows' argmax ids
    x0_p: list        # their probabilities
    new_tokens: list  # what handle_pattern reads
    path: str         # "empty_box" | "box" | "ref" | "argmax": which rule produced new_tokens
    box: dict         # decode_bbox_avg's detail
    ref: dict         # decode_ref's detail (None when not consulted)


def choose_block(logits, t, mode="hybrid"):
    """Upstream sample_tokens (temperature 0, the block branch): the block's six rows of
    logits [6, vocab] -> softmax in float32 -> read_block."""
    return read_block(torch.softmax(logits.float(), dim=-1), t, mode)


def read_block(probs, t, mode="hybrid"):
    """sample_tokens' box branch followed by the choice in _sample_token_in_mtp: the box
    reading if there is one, else the label reading, else the plain argmax of each row."""
    x0 = [argmax(probs[r]) for r in range(probs.shape[0])]
    x0_p = [float(probs[r, i]) for r, i in enumerate(x0)]
    box, box_detail = decode_bbox_avg(probs, t, mode)
    if box is not None:
        path = "empty_box" if box_detail["frame"] == "empty_box" else "box"
        return BlockChoice(x0, x0_p, box, path, box_detail, None)
    ref, ref_detail = decode_ref(probs, t)
    if ref is not None:
        return BlockChoice(x0, x0_p, ref, "ref", box_detail, ref_detail)
    # Upstream: decode_* both failed -> a [0] placeholder -> "is_box_empty" -> x0.
    return BlockChoice(x0, x0_p, list(x0), "argmax", box_detail, ref_detail)


@dataclasses.dataclass
class Pattern:
    type: str        # im_end | empty_box | coord_box | point_box | error_box | ref_object
    tokens: list     # what to commit
    to_ar: bool      # hybrid: continue one token at a time
    terminal: bool   # stop generating


def handle_pattern(x0, t, mode="hybrid"):
    """Upstream handle_pattern: what a block commits, read from new_tokens (6 ids)."""
    x0 = list(x0)
    if x0[0] in (t.null, t.im_end):
        return Pattern("im_end", [t.im_end], False, True)
    if x0[:2] == [t.box_start, t.none]:
        return Pattern("empty_box", [t.box_start, t.none, t.box_end], False, False)
    if x0[0] == t.box_start:
        n = 1  # index of the first non-coordinate after <box>, looking at x0[1:5]
        while n < 5 and t.is_coord(x0[n]):
            n += 1
        if n == 5 and x0[5] == t.box_end:
            return Pattern("coord_box", x0, False, False)
        if n == 3 and x0[3] == t.box_end:
            return Pattern("point_box", x0[:4], False, False)
        if mode == "fast":
            return Pattern("coord_box", x0, False, False)  # fast mode commits the six as they are
        return Pattern("error_box", x0[:n], True, False)
    # Anything else is text: cut at the first <null>, and of two trailing </ref> keep one.
    if t.null in x0:
        x0 = x0[:x0.index(t.null)]
    if len(x0) >= 2 and x0[-1] == x0[-2] == t.ref_end:
        x0 = x0[:-1]
    return Pattern("ref_object", x0, False, False)


def classify_ar(token, t, mode="hybrid"):
    """Upstream _sample_token_in_ar: the kind of a one-token step. In hybrid mode AR only
    finishes a box: </box> goes back to blocks, a coordinate or None continues, and any
    other token ends generation (committed, as upstream appends it before breaking)."""
    if mode == "hybrid":
        if token == t.box_end:
            return "box_end_ar"
        if t.is_coord(token) or token == t.none:
            return "coord_ar"
        return "im_end"
    return "im_end" if token == t.im_end else "continue_ar"


# ---------------------------------------------------------------------------------------
# Masks (mask_sdpa_utils.py)
# ---------------------------------------------------------------------------------------


def step_mask(n_cached, n_pending, block):
    """What each row of one step may read: bool [n_pending + b, n_cached + n_pending + b],
    b = block size or 0. Upstream builds it as the causal mask (_prepare_4d_causal_attention_mask)
    and then, when the input ends with <text_mask> (Qwen2Model.forward), applies
    update_causal_mask_for_one_gen_window_2d: the block's rows read the whole block (both
    ways) and not the column just before it, which is the last committed token: the block's
    slot 0 is that token again, at the same position."""
    rows = n_pending + block
    cols = n_cached + rows
    q = torch.arange(rows)[:, None] + n_cached  # each row's index among the columns
    allowed = torch.arange(cols)[None, :] <= q
    if block:
        allowed[-block:, -block:] = True
        allowed[-block:, -block - 1] = False
    return allowed


def training_mask(x0_len, slot0_positions, block):
    """The training layout's mask (upstream create_block_diff_mask_by_pe_4d): a clean
    sequence of x0_len tokens (causal among themselves) followed by blocks of `block` rows;
    block k, whose slot 0 sits at position p = slot0_positions[k], reads the clean tokens
    before position p and its own rows both ways. Row for row this is step_mask's block
    with every clean token before the block cached."""
    n = x0_len + block * len(slot0_positions)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[:x0_len, :x0_len] = torch.ones(x0_len, x0_len, dtype=torch.bool).tril()
    for k, p in enumerate(slot0_positions):
        r = x0_len + block * k
        allowed[r:r + block, :p] = True
        allowed[r:r + block, r:r + block] = True
    return allowed


def block_positions(slot0_position, block):
    """Slot 0 repeats the last committed token's position; the masks follow it
    (upstream _prepare_inputs_in_mtp: the block's positions minus one)."""
    return list(range(slot0_position, slot0_position + block))


# ---------------------------------------------------------------------------------------
# The block layout of an answer (training)
# ---------------------------------------------------------------------------------------


def answer_blocks(answer, t):
    """How an answer splits into blocks, our reading of the paper's four block types and of
    what handle_pattern expects back: a label <ref>..</ref>, a box <box>x1 y1 x2 y2</box>, a
    point <box>x y</box>, a negative <box>None</box>, and the end <|im_end|>; each padded
    with <null> to the block size (a label longer than a block continues in the next).
    Returns [(start, targets)]: start is the answer index of the block's first target, so
    slot 0 holds the token before it (the prompt's last token for start 0)."""
    units, cur = [], []
    for i, tok in enumerate(answer):
        if tok in (t.ref_start, t.box_start, t.im_end) and cur:
            units.append(cur)
            cur = []
        cur.append(i)
        if tok in (t.ref_end, t.box_end, t.im_end):
            units.append(cur)
            cur = []
    if cur:
        units.append(cur)
    out = []
    for u in units:
        for c in range(0, len(u), t.block_size):
            idx = u[c:c + t.block_size]
            targets = [answer[i] for i in idx] + [t.null] * (t.block_size - len(idx))
            out.append((idx[0], targets))
    return out


# ---------------------------------------------------------------------------------------
# The forward pass with a KV cache (the engine's view of one step)
# ---------------------------------------------------------------------------------------


class KVCache:
    """Per decoder layer, the keys (after RoPE) and values of the committed tokens:
    [kv_heads, n, head_dim] each. Only ever appended to; a step's block rows are computed
    against it and never stored."""

    def __init__(self, layers):
        self.k = [None] * layers
        self.v = [None] * layers

    def __len__(self):
        return 0 if self.k[0] is None else self.k[0].shape[1]

    def append(self, layer, k, v):
        self.k[layer] = k if self.k[layer] is None else torch.cat((self.k[layer], k), dim=1)
        self.v[layer] = v if self.v[layer] is None else torch.cat((self.v[layer], v), dim=1)


@torch.no_grad()
def forward_step(model, cache, ids, positions, allowed, keep, image_embeds=None):
    """One step: rows `ids` at `positions` against the cache, reading what `allowed`
    [rows, len(cache) + rows] lets them. Appends the first `keep` rows' keys and values to
    the cache (the pending committed tokens; the block's are dropped, as upstream's
    past_key_values[..., :generated.shape[1], :] does). Returns logits [rows, vocab]."""
    lm = model.language_model
    t = model.cfg.text
    ids_t = torch.tensor(ids, dtype=torch.int64)
    n_img = int((ids_t == model.cfg.image_token_id).sum())
    x = model.embed(ids_t[None], image_embeds if n_img else None)[0]
    cos, sin = rope_1d_cos_sin(torch.tensor(positions), t.head_dim, t.rope_theta)
    rep = t.heads // t.kv_heads
    S = len(ids)
    for li, layer in enumerate(lm.model.layers):
        a = layer.self_attn
        h = layer.input_layernorm(x)
        q = a.q_proj(h).view(S, a.heads, a.head_dim).transpose(0, 1)
        k = a.k_proj(h).view(S, a.kv_heads, a.head_dim).transpose(0, 1)
        v = a.v_proj(h).view(S, a.kv_heads, a.head_dim).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache.k[li] is not None:
            k_all, v_all = torch.cat((cache.k[li], k), dim=1), torch.cat((cache.v[li], v), dim=1)
        else:
            k_all, v_all = k, v
        cache.append(li, k[:, :keep], v[:, :keep])
        k_all, v_all = k_all.repeat_interleave(rep, dim=0), v_all.repeat_interleave(rep, dim=0)
        scores = q @ k_all.transpose(-1, -2) / math.sqrt(a.head_dim)
        scores = scores.masked_fill(~allowed[None], float("-inf"))
        out = (scores.softmax(-1) @ v_all).transpose(0, 1).reshape(S, -1)
        x = x + a.o_proj(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return lm.model.norm(x) @ lm.output_weight().t()


@torch.no_grad()
def block_logits_recompute(model, committed, image_embeds, t):
    """The block's six rows computed without a cache: the whole committed sequence and the
    block in one forward under step_mask (every committed token "pending"). Slow and
    obviously right; the tests hold forward_step to it."""
    L, b = len(committed), t.block_size
    ids = torch.tensor(committed + [committed[-1]] + [t.text_mask] * (b - 1))
    positions = torch.tensor(list(range(L)) + block_positions(L - 1, b))
    logits = model(ids[None], image_embeds, positions, step_mask(0, L, b))
    return logits[0, -b:]


# ---------------------------------------------------------------------------------------
# The generation loop (modeling_locateanything.py, generate)
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Generation:
    tokens: list
    steps: list       # one dict per forward (see generate)
    mode: str

    @property
    def forwards(self):
        return len(self.steps)

    def boxes(self, t):
        """(boxes written, boxes a single block step wrote whole)."""
        whole = sum(s["type"] in ("coord_box", "point_box", "empty_box") for s in self.steps)
        return self.tokens.count(t.box_start), whole


def generate(model, prompt, image_embeds, max_new, mode="hybrid", t=None, upstream_tail=False):
    """Greedy generation of at most max_new tokens after the prompt (a list of ids).

    Each step's record: "kind" ("block" or "ar"), "pending" (committed tokens fed before the
    block or as the AR input), "slot0" (the block's first position), and after the decision
    "type" (handle_pattern's, or classify_ar's), "committed" (and "cut_from" when the stop
    rules below shortened it). Block steps add "x0", "x0_p",
    "path", "new_tokens", "box" and "ref" (the values the acceptance rules compared), "top"
    (each row's five largest logits) and "margins" (each row's top1 - top2 logit); AR steps
    add "token", "p", "margin" (top1 - top2 logit).

    Two deliberate differences from upstream's loop, both only about where it stops: a step
    that commits an <|im_end|> ends generation there (upstream stops only when the step's type
    is im_end, so an <|im_end|> inside a label or a fast-mode box is followed by more
    decoding), and the last step's tokens are cut to max_new (upstream may overshoot by up to
    five). So the result is upstream's output cut after its first <|im_end|> and to max_new.
    upstream_tail=True keeps upstream's exact stopping instead."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}, want one of {MODES}")
    t = t or TokenIds.from_config(model.cfg)
    b = t.block_size
    cache = KVCache(model.cfg.text.layers)
    committed, n_prompt = list(prompt), len(prompt)
    use_block = mode != "slow"
    steps = []
    while len(committed) - n_prompt < max_new:
        n_cached, L = len(cache), len(committed)
        pending = committed[n_cached:]
        step = {"kind": "block" if use_block else "ar", "pending": len(pending)}
        if use_block:
            ids = pending + [committed[-1]] + [t.text_mask] * (b - 1)
            positions = list(range(n_cached, L)) + block_positions(L - 1, b)
            logits = forward_step(model, cache, ids, positions, step_mask(n_cached, len(pending), b),
                                  keep=len(pending), image_embeds=image_embeds)[-b:]
            choice = choose_block(logits, t, mode)
            pat = handle_pattern(choice.new_tokens, t, mode)
            top_v, top_i = torch.topk(logits, 5, dim=-1)
            step.update(slot0=L - 1, x0=choice.x0, x0_p=choice.x0_p, path=choice.path,
                        new_tokens=choice.new_tokens, box=choice.box, ref=choice.ref,
                        top={"ids": top_i.tolist(), "logits": top_v.tolist()},
                        margins=(top_v[:, 0] - top_v[:, 1]).tolist(), type=pat.type, committed=pat.tokens)
            commit, terminal = pat.tokens, pat.terminal
            if mode == "hybrid" and pat.to_ar:
                use_block = False
        else:
            logits = forward_step(model, cache, pending, list(range(n_cached, L)),
                                  step_mask(n_cached, len(pending), 0), keep=len(pending),
                                  image_embeds=image_embeds)[-1]
            top_v, top_i = torch.topk(logits, 2)
            tok = argmax(logits)
            kind = classify_ar(tok, t, mode)
            step.update(token=tok, p=float(torch.softmax(logits, -1)[tok]),
                        margin=float(top_v[0] - top_v[1]), type=kind, committed=[tok])
            commit, terminal = [tok], kind == "im_end"
            if kind == "box_end_ar":
                use_block = True
        if not upstream_tail:
            if t.im_end in commit:
                commit = commit[:commit.index(t.im_end) + 1]
                terminal = True
            commit = commit[:max_new - (L - n_prompt)]
            if commit != step["committed"]:
                step.update(cut_from=step["committed"], committed=commit)
        committed += commit
        steps.append(step)
        if terminal:
            break
    return Generation(committed[n_prompt:], steps, mode)


def load_token_ids(ckpt_dir):
    """TokenIds straight from a checkpoint's config.json."""
    from config import Config

    return TokenIds.from_config(Config.load(ckpt_dir))


def to_json(obj):
    """Step records for goldens: floats written with 9 significant digits, which give the
    same float32 back."""
    def walk(x):
        if isinstance(x, float):
            return float(f"{x:.9g}")
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x
    return json.loads(json.dumps(walk(obj)))


if __name__ == "__main__":  # pragma: no cover - a quick look at one checkpoint
    import sys

    from model import load_checkpoint

    m = load_checkpoint(sys.argv[1])
    print(load_token_ids(sys.argv[1]), os.path.basename(sys.argv[1]), m.cfg.block_size)
