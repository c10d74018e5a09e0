#!/usr/bin/python3
"""Writes a random LocateAnything checkpoint directory in the real layout.

    gen_checkpoint.py --preset tiny-bf16 --out testdata/checkpoints/tiny-bf16 --seed 1
    gen_checkpoint.py --preset full --out /data/la-random-3b            # ~7.7 GB, bf16

Presets:
  tiny-bf16  bf16, two shards + index, lm_head present (config still says tied, as the
             real checkpoint does), head_dim omitted from config.json, pos-emb grid 8x8.
  tiny-f32   f32, one file, tied embeddings (no lm_head), explicit head_dim 16 with
             hidden 32 and 4 heads (q width 64 != hidden), pos-emb grid 8 high x 10 wide.
  full       the real 3B shapes, bf16, two shards, lm_head present: 770 tensors.

Every tensor is drawn from its own generator seeded by (seed, name), so the output is the
same on every run and does not depend on the order tensors are written in. Weights are
written tensor by tensor: the full preset never holds more than one tensor in memory.
"""

import argparse
import os
import shutil
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from config import LM_HEAD, Config, PreprocessorConfig, TextConfig, VisionConfig, expected_tensors  # noqa: E402
import safetensors_io  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZER_FILES = ("vocab.json", "merges.txt", "added_tokens.json")
VOCAB = 152681
PREPROCESSOR = PreprocessorConfig(image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), in_token_limit=25600)

PRESETS = {
    "tiny-bf16": dict(
        cfg=Config(
            text=TextConfig(hidden=32, layers=2, heads=4, kv_heads=2, head_dim=8, intermediate=64, vocab=VOCAB,
                            max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                            tie_word_embeddings=True, eos_token_id=151645, bos_token_id=151643,
                            write_head_dim=False),
            vision=VisionConfig(hidden=32, layers=2, heads=2, intermediate=64, patch_size=14, merge_kernel=2,
                                pos_emb_height=8, pos_emb_width=8),
            preprocessor=PREPROCESSOR),
        dtype="BF16", shards=2, lm_head=True),
    "tiny-f32": dict(
        cfg=Config(
            text=TextConfig(hidden=32, layers=3, heads=4, kv_heads=1, head_dim=16, intermediate=80, vocab=VOCAB,
                            max_position_embeddings=32768, rope_theta=10000.0, rms_norm_eps=1e-5,
                            tie_word_embeddings=True, eos_token_id=151645, bos_token_id=151643),
            vision=VisionConfig(hidden=48, layers=3, heads=3, intermediate=96, patch_size=14, merge_kernel=2,
                                pos_emb_height=8, pos_emb_width=10),
            preprocessor=PREPROCESSOR),
        dtype="F32", shards=1, lm_head=False),
    "full": dict(
        cfg=Config(
            text=TextConfig(hidden=2048, layers=36, heads=16, kv_heads=2, head_dim=128, intermediate=11008,
                            vocab=VOCAB, max_position_embeddings=128000, rope_theta=1e6, rms_norm_eps=1e-6,
                            tie_word_embeddings=True, eos_token_id=151645, bos_token_id=151643,
                            write_head_dim=False),
            vision=VisionConfig(hidden=1152, layers=27, heads=16, intermediate=4304, patch_size=14, merge_kernel=2,
                                pos_emb_height=64, pos_emb_width=64),
            preprocessor=PREPROCESSOR),
        dtype="BF16", shards=2, lm_head=True),
}

TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}

LAYERNORM_WEIGHTS = ("norm0.weight", "norm1.weight", "final_layernorm.weight", "mlp1.0.weight",
                     "input_layernorm.weight", "post_attention_layernorm.weight", "model.norm.weight")


def init_tensor(name, shape, seed, text_hidden):
    """A random tensor for one weight. Scales keep activations near unit size so a tiny
    random model still produces well-separated logits: norm gains near 1 (but not 1, so a
    backend that skips a gain is caught), linears ~ 1/sqrt(fan_in), small biases. Token
    embeddings are small next to the layers' outputs (else a tied model, whose logits are
    dot products with the same embeddings, just repeats its last token), and the final
    norm's gain of about 4 spreads the logits so greedy choices have clear margins."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
    x = torch.randn(shape, generator=g)
    if name == "language_model.model.norm.weight":
        return 4.0 * (1.0 + 0.1 * x)
    if name.endswith(LAYERNORM_WEIGHTS):
        return 1.0 + 0.1 * x
    if name.endswith(".bias"):
        return 0.1 * x
    if name.endswith("pos_emb.weight"):
        return 0.5 * x
    if name.endswith("patch_embed.proj.weight"):
        return x / (shape[1] * shape[2] * shape[3]) ** 0.5
    if name.endswith("embed_tokens.weight"):
        return 0.25 * x
    if name == LM_HEAD:
        return x / text_hidden ** 0.5
    return x / shape[1] ** 0.5  # Linear [out, in]


def default_tokenizer_dir():
    # The repository's own copy of the Qwen2 tokenizer files (the tokenizer tests' data).
    for d in (os.path.join(REPO_ROOT, "engine", "tokenizer", "testdata"),):
        if os.path.isdir(d):
            return d
    return None


def generate(preset, out_dir, seed, tokenizer_dir):
    p = PRESETS[preset]
    cfg = p["cfg"].validate()
    os.makedirs(out_dir, exist_ok=True)
    cfg.save(out_dir, TORCH_DTYPES[p["dtype"]])
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))
    specs = expected_tensors(cfg)
    if p["lm_head"]:
        specs.append((LM_HEAD, (cfg.text.vocab, cfg.text.hidden)))

    def make(name, shape):
        return init_tensor(name, shape, seed, cfg.text.hidden)

    written = safetensors_io.write_checkpoint_weights(out_dir, specs, p["dtype"], make, p["shards"])
    return len(specs), written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True, help="checkpoint directory to write (created if needed)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer-dir", default=default_tokenizer_dir(),
                    help="folder with vocab.json, merges.txt, added_tokens.json")
    args = ap.parse_args()
    if not args.tokenizer_dir or not all(os.path.exists(os.path.join(args.tokenizer_dir, f)) for f in TOKENIZER_FILES):
        ap.error(f"--tokenizer-dir must hold {', '.join(TOKENIZER_FILES)}")
    n, written = generate(args.preset, args.out, args.seed, args.tokenizer_dir)
    total = sum(written.values())
    print(f"{args.out}: {n} tensors, {total} bytes of safetensors in {len(written)} file(s)")


if __name__ == "__main__":
    main()
