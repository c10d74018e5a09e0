"""A numpy stand-in for the TT-NN adapter: the same batched protocol, the real
LocateAnything architecture, float32 compute on the host CPU.

It exists to prove, on machines without a Blackhole chip, everything around the device
calls: the embedded-CPython bridge in engine/native/ttnn_*.c, the protocol below, and the
weights the Go side hands over. Its greedy tokens must equal the CPU backend's (the
engine/native ttnn tests check that on the committed tiny checkpoints, alone and batched).

Protocol (see engine/native/ttnn_backend.c):

    open(config: dict) -> handle                       config["max_batch"] slots
    vision(handle, patches: bytes, grid_h, grid_w)     float32 LE [gh*gw, 3, p, p]
    step(handle, slots, pending, blocks, no_output, k, watch)
        -> [(top_ids, top_probs, watch_probs)]
    release(handle, slot); reset(handle); close(handle)
    logits(handle, row) -> bytes | None                output row of the last step, float32
    image_embeddings(handle) -> (bytes, n, dim) | None

Each slot has its own KV cache and position. A step is the decoder's one call (la_backend.h):
each slot's pending tokens go into its cache (a free slot's are its prompt, from position
0, image-context ids taking the kept image embeddings), then its output rows: none
(no_output), the last pending row, or a block whose rows are computed beside the cache, in
scratch, and never stored (seeing each other both ways, or causally when the checkpoint's
text_config.causal_attn is set: config["block_causal"]). Each slot runs through exactly the
operations it would run alone (the same shapes, so the same float32 rounding): batching
cannot change a slot's tokens. Each output row is ranked by float32 softmax, ties in
ascending id order. The stand-in gains no speed from batching; the chip does, and the
protocol is what this module proves.

The maths follows tools/refmodel/model.py (the PyTorch reference) step by step; weights
are read from the checkpoint's safetensors with numpy (bf16 widened by a 16-bit shift).
Needs only numpy (Debian python3-numpy). Not fast, and not meant to be: real checkpoints
work but take minutes per request.

Settings: like the real adapter it reads no environment variable; everything comes in
config. Of config["options"] it reads one test hook, fail_in=<step>, which raises
RuntimeError in that call (vision, step, release, reset, open; step: one of live slots only,
so a test can prefill first) so the bridge's
error path can be tested. The real adapter's knobs, which the worker passes to every
adapter (canon_grid, precision, trace, trace_region_size, warmup_runs,
warmup_decode_steps, mesh_shape, device_id, python_site) and llm_dir, are accepted and
ignored: the stand-in computes in float32 at whatever grid vision() is given ("native"
included), with no trace, warm-up or device.
"""

import io
import json
import math
import os

import numpy as np

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
LM_HEAD = "language_model.lm_head.weight"
VISION_ROPE_THETA = 10000.0  # MoonViT constant, not in config.json
PROJECTOR_LN_EPS = 1e-5
# Limits of one step call (la_backend.h's LA_STEP_MAX_*).
STEP_MAX_ROWS = 16
STEP_MAX_K = 8
STEP_MAX_WATCH = 16

REQUIRED_KEYS = (
    "vision_hidden", "vision_layers", "vision_heads", "vision_intermediate", "patch_size",
    "merge_kernel", "pos_emb_height", "pos_emb_width", "vision_norm_eps", "hidden", "layers",
    "heads", "kv_heads", "head_dim", "intermediate", "vocab", "rope_theta", "rms_norm_eps",
    "image_token_id", "max_seq_len", "max_batch", "weights_dir",
)

# ---------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------


def _read_safetensors(path):
    """{name: float32 array} of one file, read through a read-only memory map."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    n = int(raw[:8].view("<u8")[0])
    if 8 + n > raw.size:
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(bytes(raw[8:8 + n]))
    body = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        chunk = body[begin:end]
        if e["dtype"] == "F32":
            t = chunk.view("<f4").astype(np.float32)
        elif e["dtype"] == "BF16":
            t = (chunk.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            t = chunk.view("<f2").astype(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {e['dtype']} not supported")
        out[name] = t.reshape(e["shape"])
    return out


def read_weights(ckpt_dir):
    """{name: float32 array} of a checkpoint directory, one file or sharded."""
    index = os.path.join(ckpt_dir, INDEX_FILE)
    if not os.path.exists(index):
        return _read_safetensors(os.path.join(ckpt_dir, SINGLE_FILE))
    with io.open(index) as f:  # this module's open() is the protocol's
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        out.update(_read_safetensors(os.path.join(ckpt_dir, name)))
    return out


# ---------------------------------------------------------------------------------------
# layer parts
# ---------------------------------------------------------------------------------------


def linear(x, w, b=None):
    y = x @ w.T
    return y + b if b is not None else y


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(eps)) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(eps)) * w


def gelu_tanh(x):
    c = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * x * (1 + np.tanh(c * (x + np.float32(0.044715) * x ** 3)))


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu_erf(x):
    e = _erf(x.astype(np.float64) / math.sqrt(2.0)).astype(np.float64)
    return (0.5 * x.astype(np.float64) * (1.0 + e)).astype(np.float32)


def silu(x):
    return x / (1 + np.exp(-x))


def softmax(x):
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(-1, keepdims=True)


def _cubic_weights(t, a=-0.75):
    """torch's bicubic convolution weights for the 4 taps at offsets -1, 0, 1, 2."""
    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return (far(t + 1), near(t), near(1 - t), far(2 - t))


def _bicubic_matrix(n_in, n_out):
    """[n_out, n_in] matrix of torch's bicubic resize along one axis (align_corners False,
    no antialias, taps clamped at the border)."""
    m = np.zeros((n_out, n_in), dtype=np.float64)
    scale = n_in / n_out
    for i in range(n_out):
        src = scale * (i + 0.5) - 0.5
        x0 = math.floor(src)
        for k, w in enumerate(_cubic_weights(src - x0)):
            m[i, min(max(x0 - 1 + k, 0), n_in - 1)] += w
    return m


def resize_pos_emb(w, grid_h, grid_w):
    """[H, W, C] -> [grid_h * grid_w, C]: as is when the grid matches, else torch bicubic."""
    h, wd, c = w.shape
    if (grid_h, grid_w) == (h, wd):
        return w.reshape(h * wd, c)
    rows, cols = _bicubic_matrix(h, grid_h), _bicubic_matrix(wd, grid_w)
    out = np.einsum("ih,hwc,jw->ijc", rows, w.astype(np.float64), cols)
    return out.astype(np.float32).reshape(grid_h * grid_w, c)


def vision_rope(grid_h, grid_w, head_dim):
    """cos, sin [L, head_dim/2] of MoonViT's 2D RoPE: pair 2i turns by col*f_i, pair 2i+1
    by row*f_i, f_i = theta^(-4i/head_dim); angles in float64."""
    n_freq = head_dim // 4
    freqs = VISION_ROPE_THETA ** (-4.0 * np.arange(n_freq, dtype=np.float64) / head_dim)
    rows = np.repeat(np.arange(grid_h, dtype=np.float64), grid_w)
    cols = np.tile(np.arange(grid_w, dtype=np.float64), grid_h)
    angles = np.empty((grid_h * grid_w, head_dim // 2), dtype=np.float64)
    angles[:, 0::2] = cols[:, None] * freqs[None]
    angles[:, 1::2] = rows[:, None] * freqs[None]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rope_adjacent(x, cos, sin):
    """Rotates (x[2j], x[2j+1]) by angle j. x [L, heads, hd]; cos/sin [L, hd/2]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def text_rope(positions, head_dim, theta):
    """cos, sin [S, head_dim] of rotate-half RoPE; angles in float64."""
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = positions.astype(np.float64)[:, None] * inv[None]
    angles = np.concatenate((angles, angles), axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate((-x[..., h:], x[..., :h]), axis=-1)


# ---------------------------------------------------------------------------------------
# the engine
# ---------------------------------------------------------------------------------------


class Engine:
    """One loaded checkpoint with max_batch sequence slots (a KV cache and a position each)
    and the kept image embeddings."""

    def __init__(self, config):
        missing = [k for k in REQUIRED_KEYS if k not in config]
        if missing:
            raise ValueError(f"config lacks {missing}")
        self.c = dict(config)
        self.fail_in = _parse_options(config.get("options", "")).get("fail_in", "")
        self._maybe_fail("open")
        c = self.c
        self.max_batch = int(c["max_batch"])
        self.block_causal = bool(c.get("block_causal", 0))
        if self.max_batch < 1:
            raise ValueError(f"max_batch {self.max_batch}: want at least 1")
        self.w = read_weights(config["weights_dir"])
        self.head = self.w.get(LM_HEAD, self.w["language_model.model.embed_tokens.weight"])
        shape = (self.max_batch, c["layers"], c["max_seq_len"], c["kv_heads"], c["head_dim"])
        self.k_cache = np.zeros(shape, np.float32)  # untouched pages cost no memory
        self.v_cache = np.zeros_like(self.k_cache)
        self.reset()

    def _maybe_fail(self, step):
        if self.fail_in == step:
            raise RuntimeError(f"stand-in told to fail in {step} (fail_in option)")

    def reset(self):
        self._maybe_fail("reset")
        self.live = [False] * self.max_batch
        self.pos = [0] * self.max_batch  # positions held by each slot
        self.image = None
        self.last_logits = []  # one row per output row of the last step

    def _check_slot(self, slot):
        if not 0 <= slot < self.max_batch:
            raise ValueError(f"slot {slot} out of range 0..{self.max_batch - 1}")

    def release(self, slot):
        self._maybe_fail("release")
        self._check_slot(slot)
        self.live[slot] = False
        self.pos[slot] = 0

    # --- vision ---------------------------------------------------------------------

    def vision(self, patches, grid_h, grid_w):
        self._maybe_fail("vision")
        c, w = self.c, self.w
        p, k = c["patch_size"], c["merge_kernel"]
        if grid_h <= 0 or grid_w <= 0 or grid_h % k or grid_w % k:
            raise ValueError(f"grid {grid_h}x{grid_w} is not a positive multiple of the merge kernel {k}")
        n = grid_h * grid_w
        if len(patches) != n * 3 * p * p * 4:
            raise ValueError(f"{len(patches)} bytes of patches, a {grid_h}x{grid_w} grid needs {n * 3 * p * p * 4}")
        x = np.frombuffer(patches, dtype="<f4").reshape(n, 3 * p * p).astype(np.float32)
        pre = "vision_model."
        x = linear(x, w[pre + "patch_embed.proj.weight"].reshape(c["vision_hidden"], -1), w[pre + "patch_embed.proj.bias"])
        x = x + resize_pos_emb(w[pre + "patch_embed.pos_emb.weight"], grid_h, grid_w)
        heads = c["vision_heads"]
        hd = c["vision_hidden"] // heads
        cos, sin = vision_rope(grid_h, grid_w, hd)
        eps = c["vision_norm_eps"]
        for i in range(c["vision_layers"]):
            b = f"{pre}encoder.blocks.{i}."
            h = layer_norm(x, w[b + "norm0.weight"], w[b + "norm0.bias"], eps)
            q, kk, v = np.split(linear(h, w[b + "wqkv.weight"], w[b + "wqkv.bias"]).reshape(n, 3, heads, hd), 3, axis=1)
            q, kk, v = q[:, 0], kk[:, 0], v[:, 0]
            q, kk = rope_adjacent(q, cos, sin), rope_adjacent(kk, cos, sin)
            scores = np.einsum("qhd,khd->hqk", q, kk) / np.float32(math.sqrt(hd))
            attn = np.einsum("hqk,khd->qhd", softmax(scores), v).reshape(n, -1)
            x = x + linear(attn, w[b + "wo.weight"], w[b + "wo.bias"])
            h = layer_norm(x, w[b + "norm1.weight"], w[b + "norm1.bias"], eps)
            h = linear(gelu_tanh(linear(h, w[b + "mlp.fc0.weight"], w[b + "mlp.fc0.bias"])),
                       w[b + "mlp.fc1.weight"], w[b + "mlp.fc1.bias"])
            x = x + h
        x = layer_norm(x, w[pre + "encoder.final_layernorm.weight"], w[pre + "encoder.final_layernorm.bias"], eps)
        # 2x2 merge: blocks in raster order, patches inside a block row by row.
        dim = x.shape[-1]
        x = x.reshape(grid_h // k, k, grid_w // k, k, dim).transpose(0, 2, 1, 3, 4)
        x = x.reshape((grid_h // k) * (grid_w // k), k * k * dim)
        x = layer_norm(x, w["mlp1.0.weight"], w["mlp1.0.bias"], PROJECTOR_LN_EPS)
        x = linear(gelu_erf(linear(x, w["mlp1.1.weight"], w["mlp1.1.bias"])), w["mlp1.3.weight"], w["mlp1.3.bias"])
        self.image = np.ascontiguousarray(x, dtype=np.float32)

    # --- decoder --------------------------------------------------------------------

    def _head(self, x):
        """The final norm and the LM head of hidden rows x [S, hidden]: logits [S, vocab]."""
        last = rms_norm(x, self.w["language_model.model.norm.weight"], self.c["rms_norm_eps"])
        return linear(last, self.head).astype(np.float32)

    def _decoder(self, slot, x, positions, n_keep, allowed):
        """The decoder layers over rows x [S, hidden] at the given positions. The first
        n_keep rows are the slot's next positions (positions[0] = what the slot holds) and
        their keys and values are written to its cache; the other rows' keys and values
        live only in this call (the block of a step). allowed [S, C] says what each row
        reads: columns 0 .. C-(S-n_keep)-1 are the cache (after this call's writes), the
        last S-n_keep columns the unkept rows. Returns the hidden rows after the last layer."""
        c, w = self.c, self.w
        s = x.shape[0]
        heads, kvh, hd = c["heads"], c["kv_heads"], c["head_dim"]
        cos, sin = text_rope(positions, hd, c["rope_theta"])
        cos, sin = cos[:, None, :], sin[:, None, :]
        start = int(positions[0])  # where the kept rows go (unused when none is kept)
        end = allowed.shape[1] - (s - n_keep)  # the cache's columns, this call's writes included
        hidden = ~allowed
        eps = c["rms_norm_eps"]
        k_cache, v_cache = self.k_cache[slot], self.v_cache[slot]
        for i in range(c["layers"]):
            p = f"language_model.model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            q = linear(h, w[p + "self_attn.q_proj.weight"], w[p + "self_attn.q_proj.bias"]).reshape(s, heads, hd)
            k = linear(h, w[p + "self_attn.k_proj.weight"], w[p + "self_attn.k_proj.bias"]).reshape(s, kvh, hd)
            v = linear(h, w[p + "self_attn.v_proj.weight"], w[p + "self_attn.v_proj.bias"]).reshape(s, kvh, hd)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_cache[i, start:start + n_keep] = k[:n_keep]
            v_cache[i, start:start + n_keep] = v[:n_keep]
            keys, vals = k_cache[i, :end], v_cache[i, :end]
            if n_keep < s:  # the unkept rows: scratch beside the cache, never stored
                keys = np.concatenate((keys, k[n_keep:]))
                vals = np.concatenate((vals, v[n_keep:]))
            rep = heads // kvh
            keys = np.repeat(keys, rep, axis=1)  # [C, heads, hd]
            vals = np.repeat(vals, rep, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, keys) / np.float32(math.sqrt(hd))
            scores = np.where(hidden[None], np.float32(-np.inf), scores)
            attn = np.einsum("hqk,khd->qhd", softmax(scores), vals).reshape(s, -1)
            x = x + linear(attn, w[p + "self_attn.o_proj.weight"])
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            h = linear(silu(linear(h, w[p + "mlp.gate_proj.weight"])) * linear(h, w[p + "mlp.up_proj.weight"]),
                       w[p + "mlp.down_proj.weight"])
            x = x + h
        return x

    def _embed(self, ids):
        return self.w["language_model.model.embed_tokens.weight"][ids].astype(np.float32)

    def _embed_pending(self, ids):
        """The embeddings of a slot's pending ids, the kept image embeddings spliced over
        its image-context ids in order (step() checked that they match)."""
        x = self._embed(ids)
        at = np.flatnonzero(np.asarray(ids) == self.c["image_token_id"])
        if at.size:
            x[at] = self.image
        return x

    # --- step: the decoder's one entry point --------------------------------------------

    def step(self, slots, pending, blocks, no_output, k, watch):
        """One step for distinct slots. Slot i's pending[i] tokens are appended to its cache
        causally (kept): a free slot's from position 0, its prefill, image-context ids
        taking the kept image embeddings. Then its output rows: none (no_output[i], without
        a block), the last pending row's (blocks[i] empty) or the rows of blocks[i] at
        positions L'-1.., which read every cached position but L'-1 and their block (both
        ways, or causally when block_causal), and whose keys and values are never kept.
        Returns one (top_ids, top_probs, watch_probs) per output row, slot after slot: the
        k most probable ids by float32 softmax (ties: lower id first), their
        probabilities, and the probabilities of the watch ids."""
        c = self.c
        slots = [int(v) for v in slots]
        pending = [[int(t) for t in p] for p in pending]
        blocks = [[int(t) for t in b] for b in blocks]
        no_output = [bool(v) for v in no_output]
        watch = [int(t) for t in watch]
        k = int(k)
        n = len(slots)
        if not 1 <= n <= self.max_batch or len(pending) != n or len(blocks) != n or len(no_output) != n:
            raise ValueError(f"{n} slots, {len(pending)} pending lists, {len(blocks)} blocks and {len(no_output)} "
                             f"no_output flags: want 1..{self.max_batch} of each, as many")
        if len(set(slots)) != n:
            raise ValueError(f"slots {slots} repeat a slot")
        if not 1 <= k <= STEP_MAX_K or len(watch) > STEP_MAX_WATCH:
            raise ValueError(f"k {k} (1..{STEP_MAX_K}) and {len(watch)} watched ids (at most {STEP_MAX_WATCH})")
        # Every slot is checked before any runs, so a refused call changes nothing.
        image_slots = []
        for slot, p, b, quiet in zip(slots, pending, blocks, no_output):
            self._check_slot(slot)
            live = self.live[slot]
            if not live and not p:
                raise ValueError(f"slot {slot} is free: a step on it is its prefill and needs its prompt pending")
            if len(p) > (STEP_MAX_ROWS if live else c["max_seq_len"]) or len(b) > STEP_MAX_ROWS or not (p or b):
                raise ValueError(f"slot {slot}: {len(p)} pending and {len(b)} block tokens, want at most "
                                 f"{STEP_MAX_ROWS} of each on a live slot (a prompt on a free one) and one or the other")
            if quiet and b:
                raise ValueError(f"slot {slot}: no_output with a block of {len(b)} (every block row is an output)")
            held = self.pos[slot] + len(p)  # L'
            if held > c["max_seq_len"] or held - 1 + len(b) > c["max_seq_len"]:
                raise ValueError(f"slot {slot} is full: {self.pos[slot]} positions, {len(p)} pending and a block of "
                                 f"{len(b)}, max_seq_len {c['max_seq_len']}")
            if (live and c["image_token_id"] in p) or c["image_token_id"] in b:
                raise ValueError(f"slot {slot}: the image-context id {c['image_token_id']} in a live slot's pending "
                                 "ids or a block, which only a free slot's prompt may hold (images come with a prefill)")
            if c["image_token_id"] in p:
                image_slots.append(slot)
        for t in [t for p in pending for t in p] + [t for b in blocks for t in b] + watch:
            if not 0 <= t < c["vocab"]:
                raise ValueError(f"token {t} outside the vocabulary of {c['vocab']}")
        if len(image_slots) > 1:
            raise ValueError(f"slots {image_slots} hold image-context ids: at most one slot of a step may")
        if image_slots:
            p = pending[slots.index(image_slots[0])]
            have = 0 if self.image is None else self.image.shape[0]
            n_image = p.count(c["image_token_id"])
            if n_image != have:
                raise ValueError(f"prompt has {n_image} image tokens but {have} image embeddings are kept")
        if all(self.live[s] for s in slots):
            self._maybe_fail("step")
        rows = []
        for slot, p, b, quiet in zip(slots, pending, blocks, no_output):
            rows.extend(self._step_slot(slot, p, b, quiet))
        if image_slots:
            self.image = None  # consumed: the next prompt needs its own vision call
        self.last_logits = rows
        return [ranked(r, k, watch) for r in rows]

    def _step_slot(self, slot, pending, block, no_output):
        """One slot's part of a step: its output rows' logits."""
        start, n_p, n_b = self.pos[slot], len(pending), len(block)
        held = start + n_p  # L'
        x = self._embed_pending(pending)
        self.live[slot] = True
        if not block:
            # Exactly a prefill's or a decode's operations: causal rows, the last one's head.
            positions = np.arange(start, held)
            allowed = np.arange(held)[None, :] <= positions[:, None]
            x = self._decoder(slot, x, positions, n_p, allowed)
            self.pos[slot] = held
            return [] if no_output else [self._head(x[-1:])[0]]
        positions = np.concatenate((np.arange(start, held), np.arange(held - 1, held - 1 + n_b)))
        allowed = step_mask(start, n_p, n_b, self.block_causal)
        x = np.concatenate((x, self._embed(block)))
        x = self._decoder(slot, x, positions, n_p, allowed)
        self.pos[slot] = held
        return list(self._head(x[n_p:]))


def step_mask(n_cached, n_pending, n_block, block_causal=False):
    """What each row of a step reads: bool [n_pending + n_block, n_cached + n_pending +
    n_block], the columns being the cache (with the pending rows appended) and then the
    block. Pending rows are causal; block rows read every cached column but the last one
    (the last committed token, which block row 0 repeats at the same position) and the
    block: all of it in both directions, or rows 0..i for block row i when block_causal
    (the checkpoint's text_config.causal_attn)."""
    rows = n_pending + n_block
    held = n_cached + n_pending
    allowed = np.arange(held + n_block)[None, :] <= (np.arange(rows) + n_cached)[:, None]
    if n_block:
        allowed[n_pending:, :held - 1] = True
        allowed[n_pending:, held - 1] = False
        allowed[n_pending:, held:] = True
        if block_causal:
            allowed[n_pending:, held:] = np.tril(np.ones((n_block, n_block), bool))
    return allowed


def ranked(logits, k, watch):
    """(top_ids, top_probs, watch_probs) of one logits row: the float32 softmax over the
    vocabulary, its k largest probabilities, largest first with equal ones in ascending id
    order, and the probabilities of the watched ids."""
    z = logits.astype(np.float32)
    e = np.exp(z - z.max())
    probs = e / e.sum(dtype=np.float32)
    top = np.argsort(-probs, kind="stable")[:k]  # stable: among equals, the lower id first
    return ([int(i) for i in top], [float(probs[i]) for i in top], [float(probs[i]) for i in watch])


def _parse_options(lines):
    out = {}
    for line in (lines or "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


# ---------------------------------------------------------------------------------------
# the protocol
# ---------------------------------------------------------------------------------------


def open(config):  # noqa: A001 - the protocol's name
    return Engine(config)


def vision(handle, patches, grid_h, grid_w):
    handle.vision(patches, grid_h, grid_w)


def release(handle, slot):
    handle.release(slot)


def reset(handle):
    handle.reset()


def close(handle):
    handle.w = None
    handle.k_cache = handle.v_cache = None


def step(handle, slots, pending, blocks, no_output, k, watch):
    return handle.step(slots, pending, blocks, no_output, k, watch)


def logits(handle, row):
    if not 0 <= row < len(handle.last_logits):
        return None
    return handle.last_logits[row].astype("<f4").tobytes()


def image_embeddings(handle):
    if handle.image is None:
        return None
    n, dim = handle.image.shape
    return handle.image.astype("<f4").tobytes(), n, dim
