"""A numpy stand-in for the TT-NN adapter: the same step-wise protocol, the real
LocateAnything architecture, float32 compute on the host CPU.

It exists to prove, on machines without a Blackhole chip, everything around the device
calls: the embedded-CPython bridge in engine/native/ttnn_*.c, the protocol below, and the
weights the Go side hands over. Its greedy tokens must equal the CPU backend's (the
engine/native ttnn parity test checks that on the committed tiny checkpoints).

Protocol (see engine/native/ttnn_backend.c):

    open(config: dict) -> handle
    vision(handle, patches: bytes, grid_h, grid_w)     float32 LE [gh*gw, 3, p, p]
    prefill(handle, ids: list[int]) -> int             greedy first token
    decode(handle, token: int) -> int                  greedy next token
    reset(handle); close(handle)
    logits(handle) -> bytes | None                     last step, float32 [vocab]
    image_embeddings(handle) -> (bytes, n, dim) | None

The maths follows tools/refmodel/model.py (the PyTorch reference) step by step; weights
are read from the checkpoint's safetensors with numpy (bf16 widened by a 16-bit shift).
Needs only numpy (Debian python3-numpy). Not fast, and not meant to be: real checkpoints
work but take minutes per request.

Settings: like the real adapter it reads no environment variable; everything comes in
config. Of config["options"] it reads one test hook, fail_in=<step>, which raises
RuntimeError in that step (vision, prefill, decode, reset, open) so the bridge's error path
can be tested. The real adapter's knobs, which the worker passes to every adapter
(canon_grid, precision, trace, trace_region_size, warmup_runs, warmup_decode_steps,
mesh_shape, device_id, python_site) and llm_dir, are accepted and ignored: the stand-in
computes in float32 at whatever grid vision() is given ("native" included), with no trace,
warm-up or device.
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

REQUIRED_KEYS = (
    "vision_hidden", "vision_layers", "vision_heads", "vision_intermediate", "patch_size",
    "merge_kernel", "pos_emb_height", "pos_emb_width", "vision_norm_eps", "hidden", "layers",
    "heads", "kv_heads", "head_dim", "intermediate", "vocab", "rope_theta", "rms_norm_eps",
    "image_token_id", "max_seq_len", "weights_dir",
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
    """One loaded checkpoint with its KV cache and kept image embeddings."""

    def __init__(self, config):
        missing = [k for k in REQUIRED_KEYS if k not in config]
        if missing:
            raise ValueError(f"config lacks {missing}")
        self.c = dict(config)
        self.fail_in = _parse_options(config.get("options", "")).get("fail_in", "")
        self._maybe_fail("open")
        self.w = read_weights(config["weights_dir"])
        self.head = self.w.get(LM_HEAD, self.w["language_model.model.embed_tokens.weight"])
        c = self.c
        self.k_cache = np.zeros((c["layers"], c["max_seq_len"], c["kv_heads"], c["head_dim"]), np.float32)
        self.v_cache = np.zeros_like(self.k_cache)
        self.reset()

    def _maybe_fail(self, step):
        if self.fail_in == step:
            raise RuntimeError(f"stand-in told to fail in {step} (fail_in option)")

    def reset(self):
        self._maybe_fail("reset")
        self.pos = 0
        self.image = None
        self.last_logits = None

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

    def _forward(self, x):
        """Runs embeddings x [S, hidden] at positions pos.. through the decoder, filling the
        KV cache; returns the last position's logits."""
        c, w = self.c, self.w
        s = x.shape[0]
        if self.pos + s > c["max_seq_len"]:
            raise ValueError(f"sequence of {self.pos + s} tokens exceeds max_seq_len {c['max_seq_len']}")
        heads, kvh, hd = c["heads"], c["kv_heads"], c["head_dim"]
        positions = np.arange(self.pos, self.pos + s)
        cos, sin = text_rope(positions, hd, c["rope_theta"])
        cos, sin = cos[:, None, :], sin[:, None, :]
        end = self.pos + s
        # causal mask over [pos, end) x [0, end)
        mask = np.arange(end)[None, :] > positions[:, None]
        eps = c["rms_norm_eps"]
        for i in range(c["layers"]):
            p = f"language_model.model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            q = linear(h, w[p + "self_attn.q_proj.weight"], w[p + "self_attn.q_proj.bias"]).reshape(s, heads, hd)
            k = linear(h, w[p + "self_attn.k_proj.weight"], w[p + "self_attn.k_proj.bias"]).reshape(s, kvh, hd)
            v = linear(h, w[p + "self_attn.v_proj.weight"], w[p + "self_attn.v_proj.bias"]).reshape(s, kvh, hd)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            self.k_cache[i, self.pos:end] = k
            self.v_cache[i, self.pos:end] = v
            rep = heads // kvh
            keys = np.repeat(self.k_cache[i, :end], rep, axis=1)  # [end, heads, hd]
            vals = np.repeat(self.v_cache[i, :end], rep, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, keys) / np.float32(math.sqrt(hd))
            scores = np.where(mask[None], np.float32(-np.inf), scores)
            attn = np.einsum("hqk,khd->qhd", softmax(scores), vals).reshape(s, -1)
            x = x + linear(attn, w[p + "self_attn.o_proj.weight"])
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            h = linear(silu(linear(h, w[p + "mlp.gate_proj.weight"])) * linear(h, w[p + "mlp.up_proj.weight"]),
                       w[p + "mlp.down_proj.weight"])
            x = x + h
        self.pos = end
        last = rms_norm(x[-1:], w["language_model.model.norm.weight"], eps)
        self.last_logits = linear(last, self.head)[0].astype(np.float32)
        return int(np.argmax(self.last_logits))

    def prefill(self, ids):
        self._maybe_fail("prefill")
        c = self.c
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("prefill needs a non-empty list of token ids")
        if ids.min() < 0 or ids.max() >= c["vocab"]:
            raise ValueError(f"token id outside the vocabulary of {c['vocab']}")
        self.pos = 0
        x = self.w["language_model.model.embed_tokens.weight"][ids].astype(np.float32)
        slots = np.flatnonzero(ids == c["image_token_id"])
        have = 0 if self.image is None else self.image.shape[0]
        if slots.size != have:
            raise ValueError(f"prompt has {slots.size} image tokens but {have} image embeddings are kept")
        if have:
            x[slots] = self.image
        return self._forward(x)

    def decode(self, token):
        self._maybe_fail("decode")
        if self.pos == 0:
            raise ValueError("decode before prefill")
        if not 0 <= token < self.c["vocab"]:
            raise ValueError(f"token {token} outside the vocabulary of {self.c['vocab']}")
        x = self.w["language_model.model.embed_tokens.weight"][[token]].astype(np.float32)
        return self._forward(x)


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


def prefill(handle, ids):
    return handle.prefill(ids)


def decode(handle, token):
    return handle.decode(token)


def reset(handle):
    handle.reset()


def close(handle):
    handle.w = None
    handle.k_cache = handle.v_cache = None


def logits(handle):
    return None if handle.last_logits is None else handle.last_logits.astype("<f4").tobytes()


def image_embeddings(handle):
    if handle.image is None:
        return None
    n, dim = handle.image.shape
    return handle.image.astype("<f4").tobytes(), n, dim
