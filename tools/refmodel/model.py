"""PyTorch reference of LocateAnything-3B's forward pass, in float32.

Written from the model facts in docs/background.md ("Checkpoint", "Architecture"). Module
attribute names follow the checkpoint, so state_dict() keys are exactly the safetensors
tensor names (vision_model.*, mlp1.*, language_model.*). Plain nn.Modules, batch-first
where a batch makes sense, so the same code can train a tiny model later.

    model = load_checkpoint(ckpt_dir)                      # LocateAnything, eval mode
    emb = model.encode_image(patches, grid_h, grid_w)      # [N, text hidden]
    logits = model(ids[None], emb)                          # [1, S, vocab]
    tokens, margins, first_logits = model.greedy(ids, emb, steps=16)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from config import LM_HEAD, PROJECTOR_LN_EPS, VISION_ROPE_THETA, Config, expected_tensors
import safetensors_io

# ---------------------------------------------------------------------------------------
# MoonViT vision tower
# ---------------------------------------------------------------------------------------


class PosEmb(nn.Module):
    """Learned absolute position embedding [H, W, C], bicubic-resized to other grids."""

    def __init__(self, height, width, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(height, width, dim))

    def forward(self, grid_h, grid_w):
        """[grid_h * grid_w, C] in row-major grid order."""
        w = self.weight
        if (grid_h, grid_w) != tuple(w.shape[:2]):
            # torch's bicubic: a = -0.75, align_corners=False, no antialias. Not PIL's.
            w = F.interpolate(w.permute(2, 0, 1)[None], size=(grid_h, grid_w), mode="bicubic",
                              align_corners=False)[0].permute(1, 2, 0)
        return w.reshape(grid_h * grid_w, -1)


class PatchEmbed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        v = cfg.vision
        # Kernel = stride = patch: on one patch it is a Linear over (channel, row, col).
        self.proj = nn.Conv2d(3, v.hidden, kernel_size=v.patch_size, stride=v.patch_size)
        self.pos_emb = PosEmb(v.pos_emb_height, v.pos_emb_width, v.hidden)

    def forward(self, patches, grid_h, grid_w):
        """patches [L, 3, p, p] -> [L, C]."""
        x = self.proj(patches).flatten(1)
        return x + self.pos_emb(grid_h, grid_w)


def rope_2d_angles(grid_h, grid_w, head_dim, theta=VISION_ROPE_THETA):
    """Angles [L, head_dim/2] of MoonViT's 2D rotary embedding: for frequency
    f_i = theta^(-4i/head_dim), pair 2i (elements 4i, 4i+1) turns by col * f_i and pair 2i+1
    (elements 4i+2, 4i+3) by row * f_i. Computed in float64, returned as float32."""
    n_freq = head_dim // 4
    freqs = theta ** (-4.0 * torch.arange(n_freq, dtype=torch.float64) / head_dim)
    rows = torch.arange(grid_h, dtype=torch.float64).repeat_interleave(grid_w)
    cols = torch.arange(grid_w, dtype=torch.float64).repeat(grid_h)
    angles = torch.empty(grid_h * grid_w, head_dim // 2, dtype=torch.float64)
    angles[:, 0::2] = cols[:, None] * freqs[None]
    angles[:, 1::2] = rows[:, None] * freqs[None]
    return angles


def apply_rope_adjacent(x, angles):
    """Rotates adjacent pairs (x[2j], x[2j+1]) as complex numbers by angles[..., j].
    x: [L, heads, head_dim]; angles: [L, head_dim/2]."""
    cos = torch.cos(angles).to(x.dtype)[:, None, :]
    sin = torch.sin(angles).to(x.dtype)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2)


class VisionMLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc0 = nn.Linear(dim, hidden)
        self.fc1 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc1(F.gelu(self.fc0(x), approximate="tanh"))


class VisionBlock(nn.Module):
    """Pre-norm block: x += wo(attn(norm0(x))); x += mlp(norm1(x)). Bidirectional."""

    def __init__(self, cfg):
        super().__init__()
        v = cfg.vision
        self.heads, self.head_dim = v.heads, v.head_dim
        self.norm0 = nn.LayerNorm(v.hidden, eps=v.norm_eps)
        self.wqkv = nn.Linear(v.hidden, 3 * v.hidden)
        self.wo = nn.Linear(v.hidden, v.hidden)
        self.norm1 = nn.LayerNorm(v.hidden, eps=v.norm_eps)
        self.mlp = VisionMLP(v.hidden, v.intermediate)

    def attention(self, x, angles):
        L = x.shape[0]
        q, k, v = self.wqkv(x).view(L, 3, self.heads, self.head_dim).unbind(1)
        q, k = apply_rope_adjacent(q, angles), apply_rope_adjacent(k, angles)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.head_dim)
        out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
        return self.wo(out.reshape(L, -1))

    def forward(self, x, angles):
        x = x + self.attention(self.norm0(x), angles)
        return x + self.mlp(self.norm1(x))


class VisionEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.blocks = nn.ModuleList(VisionBlock(cfg) for _ in range(cfg.vision.layers))
        self.final_layernorm = nn.LayerNorm(cfg.vision.hidden, eps=cfg.vision.norm_eps)

    def forward(self, x, angles):
        for block in self.blocks:
            x = block(x, angles)
        return self.final_layernorm(x)


class MoonViT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.encoder = VisionEncoder(cfg)

    def forward(self, patches, grid_h, grid_w):
        """patches [gh*gw, 3, p, p] -> per-patch features [gh*gw, C] after the final LN."""
        if patches.shape[0] != grid_h * grid_w:
            raise ValueError(f"{patches.shape[0]} patches for a {grid_h}x{grid_w} grid")
        x = self.patch_embed(patches, grid_h, grid_w)
        angles = rope_2d_angles(grid_h, grid_w, self.cfg.vision.head_dim)
        return self.encoder(x, angles)


def merge_patches(x, grid_h, grid_w, k):
    """[gh*gw, C] -> [(gh/k)*(gw/k), k*k*C]: k x k blocks in raster order, and inside a
    block the patches concatenated row by row ((0,0), (0,1), (1,0), (1,1) for k = 2)."""
    if grid_h % k or grid_w % k:
        raise ValueError(f"grid {grid_h}x{grid_w} is not a multiple of the merge kernel {k}")
    C = x.shape[-1]
    x = x.view(grid_h // k, k, grid_w // k, k, C).permute(0, 2, 1, 3, 4)
    return x.reshape((grid_h // k) * (grid_w // k), k * k * C)


# ---------------------------------------------------------------------------------------
# Qwen2 decoder
# ---------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_1d_cos_sin(positions, head_dim, theta):
    """cos, sin [S, head_dim] of rotate-half ("NEOX") RoPE, angles in float64."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None]
    angles = torch.cat((angles, angles), dim=-1)
    return torch.cos(angles).float(), torch.sin(angles).float()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """Causal grouped-query attention with q/k/v bias; o_proj without."""

    def __init__(self, cfg):
        super().__init__()
        t = cfg.text
        self.heads, self.kv_heads, self.head_dim = t.heads, t.kv_heads, t.head_dim
        self.q_proj = nn.Linear(t.hidden, t.heads * t.head_dim)
        self.k_proj = nn.Linear(t.hidden, t.kv_heads * t.head_dim)
        self.v_proj = nn.Linear(t.hidden, t.kv_heads * t.head_dim)
        self.o_proj = nn.Linear(t.heads * t.head_dim, t.hidden, bias=False)

    def forward(self, x, cos, sin, allowed=None):
        """allowed: None for the causal mask, else a bool mask [S, S] or [B, 1, S, S] of the
        keys each query may read (parallel box decoding's block mask, tools/refmodel/hybrid.py)."""
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Query head h reads KV head h // (heads / kv_heads).
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if allowed is None:
            causal = torch.ones(S, S, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(causal, float("-inf"))
        else:
            scores = scores.masked_fill(~allowed, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        t = cfg.text
        self.gate_proj = nn.Linear(t.hidden, t.intermediate, bias=False)
        self.up_proj = nn.Linear(t.hidden, t.intermediate, bias=False)
        self.down_proj = nn.Linear(t.intermediate, t.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.text.hidden, cfg.text.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.text.hidden, cfg.text.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, allowed=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        t = cfg.text
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(t.vocab, t.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(t.layers))
        self.norm = RMSNorm(t.hidden, t.rms_norm_eps)

    def forward(self, inputs_embeds, positions=None, allowed=None):
        """[B, S, H] embeddings -> final normed hidden states. By default the positions are
        0..S-1 and attention is causal; parallel box decoding passes its own positions ([S]
        or [B, S]) and the bool mask of what each query may read (Attention.forward)."""
        B, S = inputs_embeds.shape[:2]
        t = self.cfg.text
        if positions is None:
            cos, sin = rope_1d_cos_sin(torch.arange(S), t.head_dim, t.rope_theta)
        else:
            cos, sin = rope_1d_cos_sin(positions.reshape(-1), t.head_dim, t.rope_theta)
            if positions.dim() == 2:  # one row of positions per sequence: [B, 1, S, head_dim]
                cos, sin = cos.view(B, 1, S, -1), sin.view(B, 1, S, -1)
        x = inputs_embeds
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x)


class LanguageModel(nn.Module):
    """Qwen2 decoder plus the output projection: lm_head when the checkpoint has one,
    else the embedding matrix (tied)."""

    def __init__(self, cfg, lm_head):
        super().__init__()
        self.model = Qwen2Model(cfg)
        self.lm_head = nn.Linear(cfg.text.hidden, cfg.text.vocab, bias=False) if lm_head else None

    def forward(self, inputs_embeds, positions=None, allowed=None):
        h = self.model(inputs_embeds, positions, allowed)
        return h @ self.output_weight().t()

    def output_weight(self):
        return self.lm_head.weight if self.lm_head is not None else self.model.embed_tokens.weight


# ---------------------------------------------------------------------------------------
# The whole model
# ---------------------------------------------------------------------------------------


class LocateAnything(nn.Module):
    def __init__(self, cfg: Config, lm_head: bool):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        merged = cfg.vision.hidden * cfg.vision.merge_kernel ** 2
        self.vision_model = MoonViT(cfg)
        self.mlp1 = nn.Sequential(
            nn.LayerNorm(merged, eps=PROJECTOR_LN_EPS),
            nn.Linear(merged, cfg.text.hidden),
            nn.GELU(),  # exact erf form
            nn.Linear(cfg.text.hidden, cfg.text.hidden),
        )
        self.language_model = LanguageModel(cfg, lm_head)

    def encode_image(self, patches, grid_h, grid_w):
        """Normalized patches [gh*gw, 3, p, p] -> image embeddings [gh*gw/k^2, text hidden],
        one per <IMG_CONTEXT> slot."""
        feats = self.vision_model(patches, grid_h, grid_w)
        return self.mlp1(merge_patches(feats, grid_h, grid_w, self.cfg.vision.merge_kernel))

    def vision_features(self, patches, grid_h, grid_w):
        """Per-patch vision features before the merge (for debugging parity)."""
        return self.vision_model(patches, grid_h, grid_w)

    def embed(self, ids, image_embeds=None):
        """ids [B, S] -> [B, S, H] with image_embeds' rows spliced, in order, over the
        positions whose id is the image token (row-major over batch and sequence)."""
        x = self.language_model.model.embed_tokens(ids)
        slots = ids == self.cfg.image_token_id
        n = int(slots.sum())
        have = 0 if image_embeds is None else image_embeds.shape[0]
        if n != have:
            raise ValueError(f"prompt has {n} image tokens but {have} image embeddings were given")
        if n:
            x = x.clone()
            x[slots] = image_embeds.to(x.dtype)
        return x

    def forward(self, ids, image_embeds=None, positions=None, allowed=None):
        """ids [B, S] -> logits [B, S, vocab]; positions and allowed as in Qwen2Model.forward
        (default: 0..S-1, causal)."""
        return self.language_model(self.embed(ids, image_embeds), positions, allowed)

    @torch.no_grad()
    def greedy(self, ids, image_embeds, steps):
        """Greedy decoding from a 1-D prompt, recomputing the whole sequence each step (slow
        and obviously right; a reference, not an engine). Does not stop at EOS.
        Returns (tokens[steps], margins[steps] = top1 - top2 logit per step, the first
        step's logits [vocab])."""
        seq = ids.clone()
        tokens, margins, first = [], [], None
        for _ in range(steps):
            logits = self(seq[None], image_embeds)[0, -1]
            if first is None:
                first = logits.clone()
            top = torch.topk(logits, 2)
            tokens.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            seq = torch.cat((seq, top.indices[:1].to(seq.dtype)))
        return tokens, margins, first


# ---------------------------------------------------------------------------------------
# Checkpoint I/O
# ---------------------------------------------------------------------------------------


def load_checkpoint(ckpt_dir):
    """Builds the model from a checkpoint directory (weights converted to float32)."""
    cfg = Config.load(ckpt_dir)
    weights = safetensors_io.read_checkpoint_weights(ckpt_dir)
    model = LocateAnything(cfg, lm_head=LM_HEAD in weights)
    expected = dict(expected_tensors(cfg))
    if LM_HEAD in weights:
        expected[LM_HEAD] = (cfg.text.vocab, cfg.text.hidden)
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise ValueError(f"{ckpt_dir}: missing tensors {missing[:5]}")
    for name, shape in expected.items():
        if tuple(weights[name].shape) != tuple(shape):
            raise ValueError(f"{ckpt_dir}: tensor {name} has shape {tuple(weights[name].shape)}, want {shape}")
    model.load_state_dict({k: weights[k] for k in expected}, strict=True)
    return model.eval()


def save_checkpoint(model, out_dir, dtype="BF16", shards=1):
    """Writes config files and the weights in the real layout (dtype "BF16", "F16", "F32").
    Tokenizer files are the caller's business."""
    model.cfg.save(out_dir, {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype])
    state = model.state_dict()
    specs = [(n, tuple(state[n].shape)) for n, _ in expected_tensors(model.cfg)]
    if LM_HEAD in state:
        specs.append((LM_HEAD, tuple(state[LM_HEAD].shape)))
    return safetensors_io.write_checkpoint_weights(out_dir, specs, dtype, lambda n, _: state[n], shards)
