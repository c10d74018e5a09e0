"""The checkpoint's configuration, read from and written to the real file layout:
config.json (top-level token ids, nested text_config and vision_config) and
preprocessor_config.json. Field meanings: docs/background.md ("Checkpoint") and
docs/checkpoint.md."""

import dataclasses
import json
import os

CONFIG_FILE = "config.json"
PREPROCESSOR_FILE = "preprocessor_config.json"

# MoonViT constants that the config files do not carry.
VISION_ROPE_THETA = 10000.0
PROJECTOR_LN_EPS = 1e-5


@dataclasses.dataclass
class TextConfig:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    eos_token_id: int
    bos_token_id: int
    write_head_dim: bool = True  # False: omit head_dim from config.json (hidden/heads)


@dataclasses.dataclass
class VisionConfig:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    patch_size: int
    merge_kernel: int
    pos_emb_height: int
    pos_emb_width: int
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.hidden // self.heads


@dataclasses.dataclass
class PreprocessorConfig:
    image_mean: tuple
    image_std: tuple
    in_token_limit: int


@dataclasses.dataclass
class Config:
    text: TextConfig
    vision: VisionConfig
    preprocessor: PreprocessorConfig
    image_token_id: int = 151665
    box_start_token_id: int = 151668
    box_end_token_id: int = 151669
    ref_start_token_id: int = 151672
    ref_end_token_id: int = 151673
    coord_start_token_id: int = 151677
    coord_end_token_id: int = 152677
    none_token_id: int = 4064
    # Parallel box decoding (tools/refmodel/hybrid.py); config.json keeps them in text_config.
    null_token_id: int = 152678
    switch_token_id: int = 152679
    text_mask_token_id: int = 151676
    block_size: int = 6

    def validate(self):
        t, v = self.text, self.vision
        problems = []
        if t.heads % t.kv_heads:
            problems.append(f"text heads {t.heads} not a multiple of kv heads {t.kv_heads}")
        if t.head_dim % 2:
            problems.append(f"text head_dim {t.head_dim} is odd")
        if v.hidden % v.heads or v.head_dim % 4:
            problems.append(f"vision head_dim {v.hidden}/{v.heads} is not a multiple of 4")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # --- the real file layout -------------------------------------------------------

    def to_json(self, torch_dtype="bfloat16"):
        """(config.json dict, preprocessor_config.json dict); torch_dtype names the
        weights' storage type ("bfloat16", "float32")."""
        t, v, p = self.text, self.vision, self.preprocessor
        text = {
            "model_type": "qwen2",
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_size": t.hidden,
            "num_hidden_layers": t.layers,
            "num_attention_heads": t.heads,
            "num_key_value_heads": t.kv_heads,
            "intermediate_size": t.intermediate,
            "vocab_size": t.vocab,
            "max_position_embeddings": t.max_position_embeddings,
            "rope_theta": t.rope_theta,
            "rms_norm_eps": t.rms_norm_eps,
            "hidden_act": "silu",
            "tie_word_embeddings": t.tie_word_embeddings,
            "eos_token_id": t.eos_token_id,
            "bos_token_id": t.bos_token_id,
            "null_token_id": self.null_token_id,
            "switch_token_id": self.switch_token_id,
            "text_mask_token_id": self.text_mask_token_id,
            "block_size": self.block_size,
            "torch_dtype": torch_dtype,
        }
        if t.write_head_dim:
            text["head_dim"] = t.head_dim
        vision = {
            "model_type": "moonvit",
            "hidden_size": v.hidden,
            "num_hidden_layers": v.layers,
            "num_attention_heads": v.heads,
            "intermediate_size": v.intermediate,
            "patch_size": v.patch_size,
            "merge_kernel_size": [v.merge_kernel, v.merge_kernel],
            "init_pos_emb_height": v.pos_emb_height,
            "init_pos_emb_width": v.pos_emb_width,
        }
        cfg = {
            "model_type": "locateanything",
            "architectures": ["LocateAnythingForConditionalGeneration"],
            "image_token_index": self.image_token_id,
            "box_start_token_id": self.box_start_token_id,
            "box_end_token_id": self.box_end_token_id,
            "ref_start_token_id": self.ref_start_token_id,
            "ref_end_token_id": self.ref_end_token_id,
            "coord_start_token_id": self.coord_start_token_id,
            "coord_end_token_id": self.coord_end_token_id,
            "none_token_id": self.none_token_id,
            "mlp_connector_layers": 2,
            "text_config": text,
            "vision_config": vision,
        }
        pre = {
            "image_mean": list(p.image_mean),
            "image_std": list(p.image_std),
            "in_token_limit": p.in_token_limit,
            "patch_size": v.patch_size,
            "merge_kernel_size": [v.merge_kernel, v.merge_kernel],
        }
        return cfg, pre

    def save(self, out_dir, torch_dtype="bfloat16"):
        cfg, pre = self.to_json(torch_dtype)
        for name, obj in ((CONFIG_FILE, cfg), (PREPROCESSOR_FILE, pre)):
            with open(os.path.join(out_dir, name), "w") as f:
                json.dump(obj, f, indent=2)
                f.write("\n")

    @classmethod
    def load(cls, ckpt_dir):
        with open(os.path.join(ckpt_dir, CONFIG_FILE)) as f:
            cfg = json.load(f)
        with open(os.path.join(ckpt_dir, PREPROCESSOR_FILE)) as f:
            pre = json.load(f)
        t, v = cfg["text_config"], cfg["vision_config"]

        def first(x):
            return x[0] if isinstance(x, list) else x

        def kernel(x):
            if isinstance(x, list):
                if len(x) != 2 or x[0] != x[1]:
                    raise ValueError(f"merge_kernel_size {x} is not square")
                return x[0]
            return x

        heads = t["num_attention_heads"]
        text = TextConfig(
            hidden=t["hidden_size"], layers=t["num_hidden_layers"], heads=heads,
            kv_heads=t.get("num_key_value_heads") or heads,
            head_dim=t.get("head_dim") or t["hidden_size"] // heads,
            intermediate=t["intermediate_size"], vocab=t["vocab_size"],
            max_position_embeddings=t["max_position_embeddings"],
            rope_theta=float(t["rope_theta"]), rms_norm_eps=float(t["rms_norm_eps"]),
            tie_word_embeddings=bool(t.get("tie_word_embeddings", False)),
            eos_token_id=first(t["eos_token_id"]), bos_token_id=first(t.get("bos_token_id", -1)),
            write_head_dim="head_dim" in t,
        )
        vision = VisionConfig(
            hidden=v["hidden_size"], layers=v["num_hidden_layers"], heads=v["num_attention_heads"],
            intermediate=v["intermediate_size"], patch_size=v["patch_size"],
            merge_kernel=kernel(v["merge_kernel_size"]),
            pos_emb_height=v["init_pos_emb_height"], pos_emb_width=v["init_pos_emb_width"],
            norm_eps=float(v.get("layer_norm_eps", 1e-5)),
        )
        pre_cfg = PreprocessorConfig(
            image_mean=tuple(pre["image_mean"]), image_std=tuple(pre["image_std"]),
            in_token_limit=pre["in_token_limit"],
        )
        return cls(
            text=text, vision=vision, preprocessor=pre_cfg,
            image_token_id=cfg["image_token_index"],
            box_start_token_id=cfg["box_start_token_id"], box_end_token_id=cfg["box_end_token_id"],
            ref_start_token_id=cfg["ref_start_token_id"], ref_end_token_id=cfg["ref_end_token_id"],
            coord_start_token_id=cfg["coord_start_token_id"], coord_end_token_id=cfg["coord_end_token_id"],
            none_token_id=cfg["none_token_id"],
            null_token_id=t.get("null_token_id", 152678), switch_token_id=t.get("switch_token_id", 152679),
            text_mask_token_id=t.get("text_mask_token_id", 151676), block_size=t.get("block_size", 6),
        ).validate()


def expected_tensors(cfg):
    """[(name, shape)] of every tensor the forward pass reads, in forward order, without
    the optional language_model.lm_head.weight. Mirrors engine/checkpoint's list."""
    t, v = cfg.text, cfg.vision
    specs = [
        ("vision_model.patch_embed.proj.weight", (v.hidden, 3, v.patch_size, v.patch_size)),
        ("vision_model.patch_embed.proj.bias", (v.hidden,)),
        ("vision_model.patch_embed.pos_emb.weight", (v.pos_emb_height, v.pos_emb_width, v.hidden)),
    ]
    for i in range(v.layers):
        p = f"vision_model.encoder.blocks.{i}."
        specs += [
            (p + "norm0.weight", (v.hidden,)), (p + "norm0.bias", (v.hidden,)),
            (p + "wqkv.weight", (3 * v.hidden, v.hidden)), (p + "wqkv.bias", (3 * v.hidden,)),
            (p + "wo.weight", (v.hidden, v.hidden)), (p + "wo.bias", (v.hidden,)),
            (p + "norm1.weight", (v.hidden,)), (p + "norm1.bias", (v.hidden,)),
            (p + "mlp.fc0.weight", (v.intermediate, v.hidden)), (p + "mlp.fc0.bias", (v.intermediate,)),
            (p + "mlp.fc1.weight", (v.hidden, v.intermediate)), (p + "mlp.fc1.bias", (v.hidden,)),
        ]
    merged = v.hidden * v.merge_kernel ** 2
    specs += [
        ("vision_model.encoder.final_layernorm.weight", (v.hidden,)),
        ("vision_model.encoder.final_layernorm.bias", (v.hidden,)),
        ("mlp1.0.weight", (merged,)), ("mlp1.0.bias", (merged,)),
        ("mlp1.1.weight", (t.hidden, merged)), ("mlp1.1.bias", (t.hidden,)),
        ("mlp1.3.weight", (t.hidden, t.hidden)), ("mlp1.3.bias", (t.hidden,)),
        ("language_model.model.embed_tokens.weight", (t.vocab, t.hidden)),
    ]
    q, kv = t.heads * t.head_dim, t.kv_heads * t.head_dim
    for i in range(t.layers):
        p = f"language_model.model.layers.{i}."
        specs += [
            (p + "input_layernorm.weight", (t.hidden,)),
            (p + "self_attn.q_proj.weight", (q, t.hidden)), (p + "self_attn.q_proj.bias", (q,)),
            (p + "self_attn.k_proj.weight", (kv, t.hidden)), (p + "self_attn.k_proj.bias", (kv,)),
            (p + "self_attn.v_proj.weight", (kv, t.hidden)), (p + "self_attn.v_proj.bias", (kv,)),
            (p + "self_attn.o_proj.weight", (t.hidden, q)),
            (p + "post_attention_layernorm.weight", (t.hidden,)),
            (p + "mlp.gate_proj.weight", (t.intermediate, t.hidden)),
            (p + "mlp.up_proj.weight", (t.intermediate, t.hidden)),
            (p + "mlp.down_proj.weight", (t.hidden, t.intermediate)),
        ]
    specs.append(("language_model.model.norm.weight", (t.hidden,)))
    return specs


LM_HEAD = "language_model.lm_head.weight"
