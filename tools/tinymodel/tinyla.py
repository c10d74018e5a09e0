"""The tiny LocateAnything: its configuration, initialisation, a batched training forward
pass over tools/refmodel's modules, sample encoding and greedy decoding.

The model is tools/refmodel's LocateAnything unchanged (so state_dict names are the real
checkpoint's tensor names); this module only adds what training needs around it:

    tok = bpe.Tokenizer.load(ckpt_dir)
    model = refmodel.LocateAnything(make_config(tok), lm_head=False); init_weights(model, tok)
    logits = forward_batch(model, patches[B, L, 3, 14, 14], grid_h, grid_w, ids[B, S])
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "refmodel"))
sys.path.insert(0, HERE)

import config as refconfig  # noqa: E402  (tools/refmodel)
import hybrid  # noqa: E402,F401  (tools/refmodel; train.py reads it from here)
import model as refmodel  # noqa: E402
import preprocess as refpre  # noqa: E402
import scenes  # noqa: E402

IN_TOKEN_LIMIT = 64  # patches: about a 112 x 112 px view, 16 image tokens
MAX_NEW_TOKENS = 48


# Widths and depths: "small" is the first shipped model (1.1 M parameters); "base" is about
# twice as wide and one decoder layer deeper (about 2.6 M), still a few MB in bf16.
SIZES = {
    "small": dict(text=dict(hidden=128, layers=3, heads=4, kv_heads=2, head_dim=32, intermediate=320),
                  vision=dict(hidden=96, layers=3, heads=4, intermediate=256)),
    "base": dict(text=dict(hidden=192, layers=4, heads=6, kv_heads=2, head_dim=32, intermediate=512),
                 vision=dict(hidden=128, layers=3, heads=4, intermediate=384)),
}


def make_config(tok, size="small"):
    """The tiny model's Config at one of SIZES; every token id comes from the tokenizer."""
    dims = SIZES[size]
    cfg = refconfig.Config(
        text=refconfig.TextConfig(
            **dims["text"], vocab=tok.vocab_size,
            max_position_embeddings=1024, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
            eos_token_id=tok.id("<|im_end|>"), bos_token_id=tok.id("<|endoftext|>")),
        vision=refconfig.VisionConfig(
            **dims["vision"], patch_size=14, merge_kernel=2, pos_emb_height=8, pos_emb_width=8),
        preprocessor=refconfig.PreprocessorConfig(
            image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), in_token_limit=IN_TOKEN_LIMIT),
        image_token_id=tok.id("<IMG_CONTEXT>"),
        box_start_token_id=tok.id("<box>"), box_end_token_id=tok.id("</box>"),
        ref_start_token_id=tok.id("<ref>"), ref_end_token_id=tok.id("</ref>"),
        coord_start_token_id=tok.id("<0>"), coord_end_token_id=tok.id("<1000>"),
        none_token_id=tok.id("None"),
        null_token_id=tok.id("<null>"), switch_token_id=tok.id("<switch>"),
        text_mask_token_id=tok.id("<text_mask>"),
    )
    return cfg.validate()


def save(model, tok, out_dir, dtype="BF16"):
    """Weights, config files and tokenizer files in the real layout."""
    os.makedirs(out_dir, exist_ok=True)
    refmodel.save_checkpoint(model, out_dir, dtype=dtype)
    tok.save(out_dir)


def sincos_2d(h, w, dim):
    """[h, w, dim] fixed 2D sine-cosine features: half the channels encode the row, half the
    column, at geometric frequencies. A smooth start for the learned position embedding."""
    quarter = dim // 4
    freqs = 1.0 / (100.0 ** (torch.arange(quarter, dtype=torch.float32) / quarter))
    rows = torch.arange(h, dtype=torch.float32)[:, None] * freqs[None]
    cols = torch.arange(w, dtype=torch.float32)[:, None] * freqs[None]
    out = torch.zeros(h, w, dim)
    out[:, :, 0:quarter] = torch.sin(rows)[:, None, :]
    out[:, :, quarter:2 * quarter] = torch.cos(rows)[:, None, :]
    out[:, :, 2 * quarter:3 * quarter] = torch.sin(cols)[None, :, :]
    out[:, :, 3 * quarter:4 * quarter] = torch.cos(cols)[None, :, :]
    return out


def init_weights(model, tok, seed):
    """Small-transformer initialisation, plus two helps for the coordinates: the position
    embedding starts as 2D sine-cosine features, and the 1001 coordinate embeddings (tied to
    the output head) start as smooth functions of the value, so nearby coordinates share
    what they learn."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("pos_emb.weight"):
                p.copy_(0.5 * sincos_2d(*p.shape))
            elif name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 0.02, generator=g)
            elif p.dim() >= 2:
                fan_in = p[0].numel()
                p.normal_(0.0, 1.0 / math.sqrt(fan_in), generator=g)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.fill_(1.0)
        # Output projections of residual branches start small (depth-scaled).
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight", ".wo.weight", "mlp.fc1.weight")):
                p.mul_(0.5 / math.sqrt(max(cfg.text.layers, cfg.vision.layers)))
        emb = model.language_model.model.embed_tokens.weight
        c0, c1 = cfg.coord_start_token_id, cfg.coord_end_token_id
        values = torch.arange(c1 - c0 + 1, dtype=torch.float32) / 1000.0
        dim = emb.shape[1]
        freqs = torch.exp(torch.linspace(math.log(0.5), math.log(40.0), dim // 2))
        phase = torch.rand(dim // 2, generator=g) * 2 * math.pi
        ang = 2 * math.pi * values[:, None] * freqs[None] + phase[None]
        smooth = torch.cat((torch.sin(ang), torch.cos(ang)), dim=1) / math.sqrt(dim / 2)
        emb[c0:c1 + 1] = 0.3 * smooth + 0.01 * torch.randn(c1 - c0 + 1, dim, generator=g)


# ---------------------------------------------------------------------------------------
# Batched forward pass (training); the same arithmetic as refmodel's one-image path
# ---------------------------------------------------------------------------------------


def _vision_block(block, x, angles):
    B, L, C = x.shape
    h = block.norm0(x)
    q, k, v = block.wqkv(h).view(B, L, 3, block.heads, block.head_dim).unbind(2)
    q, k = refmodel.apply_rope_adjacent(q, angles), refmodel.apply_rope_adjacent(k, angles)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(block.head_dim)
    out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(B, L, C)
    x = x + block.wo(out)
    return x + block.mlp(block.norm1(x))


def encode_images(model, patches, grid_h, grid_w):
    """patches [B, L, 3, p, p] of one grid -> image embeddings [B, L/k^2, text hidden]."""
    B, L = patches.shape[:2]
    vm = model.vision_model
    x = vm.patch_embed.proj(patches.flatten(0, 1)).flatten(1).view(B, L, -1)
    x = x + vm.patch_embed.pos_emb(grid_h, grid_w)[None]
    angles = refmodel.rope_2d_angles(grid_h, grid_w, model.cfg.vision.head_dim)
    for block in vm.encoder.blocks:
        x = _vision_block(block, x, angles)
    x = vm.encoder.final_layernorm(x)
    k = model.cfg.vision.merge_kernel
    C = x.shape[-1]
    x = x.view(B, grid_h // k, k, grid_w // k, k, C).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(B, (grid_h // k) * (grid_w // k), k * k * C)
    return model.mlp1(x)


def forward_batch(model, patches, grid_h, grid_w, ids, where=None, return_image_embeds=False, positions=None,
                  allowed=None):
    """Logits for right-padded ids [B, S], each row holding the same number of image tokens:
    [B, S, vocab], or only at the positions of the bool mask where ([n, vocab]; the output
    projection is the costliest matmul and training needs it only on the answer).
    positions [B, S] and allowed [B, 1, S, S] replace 0..S-1 and the causal mask (the block
    objective's layout, train.make_batch)."""
    emb = encode_images(model, patches, grid_h, grid_w)
    x = model.embed(ids, emb.reshape(-1, emb.shape[-1]))
    lm = model.language_model
    h = lm.model(x, positions, allowed)
    if where is not None:
        h = h[where]
    weight = lm.lm_head.weight if lm.lm_head is not None else lm.model.embed_tokens.weight
    logits = h @ weight.t()
    return (logits, emb) if return_image_embeds else logits


def forward_batch_attention(model, patches, grid_h, grid_w, ids, where, layer_index, positions=None, allowed=None):
    """Like forward_batch(..., where, return_image_embeds=True), and also the attention
    probabilities [B, heads, S, S] of decoder layer layer_index (same arithmetic as
    refmodel's Attention, spelled out to expose them)."""
    emb = encode_images(model, patches, grid_h, grid_w)
    x = model.embed(ids, emb.reshape(-1, emb.shape[-1]))
    lm = model.language_model
    t = model.cfg.text
    B, S = ids.shape
    if positions is None:
        cos, sin = refmodel.rope_1d_cos_sin(torch.arange(S), t.head_dim, t.rope_theta)
    else:
        cos, sin = refmodel.rope_1d_cos_sin(positions.reshape(-1), t.head_dim, t.rope_theta)
        cos, sin = cos.view(B, 1, S, -1), sin.view(B, 1, S, -1)
    if allowed is None:
        allowed = ~torch.ones(S, S, dtype=torch.bool).triu(1)
    probs = None
    for i, layer in enumerate(lm.model.layers):
        if i != layer_index:
            x = layer(x, cos, sin, allowed)
            continue
        a = layer.self_attn
        h = layer.input_layernorm(x)
        B = h.shape[0]
        q = a.q_proj(h).view(B, S, a.heads, a.head_dim).transpose(1, 2)
        k = a.k_proj(h).view(B, S, a.kv_heads, a.head_dim).transpose(1, 2)
        v = a.v_proj(h).view(B, S, a.kv_heads, a.head_dim).transpose(1, 2)
        q = q * cos + refmodel.rotate_half(q) * sin
        k = k * cos + refmodel.rotate_half(k) * sin
        rep = a.heads // a.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(a.head_dim)
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = scores.softmax(-1)
        out = a.o_proj((probs @ v).transpose(1, 2).reshape(B, S, -1))
        x = x + out
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    h = lm.model.norm(x)[where]
    weight = lm.lm_head.weight if lm.lm_head is not None else lm.model.embed_tokens.weight
    return h @ weight.t(), emb, probs


# ---------------------------------------------------------------------------------------
# Samples
# ---------------------------------------------------------------------------------------


def prepare_image(img):
    """The engine's preprocessing (tools/refmodel/preprocess.py): patches, grid."""
    patches, gh, gw, _ = refpre.preprocess(img, IN_TOKEN_LIMIT)
    return patches, gh, gw


def prompt_ids(tok, task, query, n_image_tokens):
    return tok.encode(scenes.chat_prompt(scenes.instruction(task, query), n_image_tokens))


def answer_ids(tok, answer):
    return tok.encode(answer + "<|im_end|>")


@torch.no_grad()
def greedy(model, patches, grid_h, grid_w, ids, eos, max_new=MAX_NEW_TOKENS, logit_bias=None):
    """Greedy decoding of one prompt (a list of ids) until eos or max_new tokens. Recomputes
    the whole sequence each step: slow and obviously right, like refmodel.greedy.
    logit_bias ({id: value}) is for calibration studies only (evaluate.py --none-bias); the
    engine has no such knob."""
    emb = model.encode_image(patches, grid_h, grid_w)
    seq, out = list(ids), []
    for _ in range(max_new):
        logits = model(torch.tensor(seq)[None], emb)[0, -1]
        for t, v in (logit_bias or {}).items():
            logits[t] += v
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        seq.append(nxt)
        if nxt == eos:
            break
    return out
